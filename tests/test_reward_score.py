"""The composite reward on the local tier: oracle outputs score 1, every kind of mistake is counted."""

from __future__ import annotations

import copy
import json

import pytest
from conftest import COUNTER, REFERENCE_ENVS
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reward_helpers import as_openai_messages, as_tool_call_tags, executed_trajectory, scenario_truth

from envreg.env import load_environment, load_scenarios
from envreg.reward.score import ScoreOptions, Scorer
from envreg.runtime import Runtime

pytestmark = pytest.mark.anyio


def catalog_scenarios() -> list:
    out = []
    for name in REFERENCE_ENVS:
        scenarios, _ = load_scenarios(load_environment(name).folder)
        out += [pytest.param(name, s.name, id=f"{name}-{s.name}") for s in scenarios]
    return out


async def score(truth, output, **options):
    async with Runtime() as rt:
        scorer = Scorer(rt, sources={"counter": COUNTER})
        return await scorer.score(truth, output, ScoreOptions(**options) if options else None)


@pytest.mark.parametrize(("env", "scenario"), catalog_scenarios())
async def test_the_oracle_scores_one_in_every_output_format(env, scenario) -> None:
    truth = scenario_truth(env, scenario)
    answer = truth["answer"]  # a read-only scenario's answer states what was found
    messages = as_openai_messages(truth["calls"])
    for output in (
        as_tool_call_tags(truth["calls"], answer=answer),
        as_openai_messages(truth["calls"], answer=answer),
        json.dumps({"tool_calls": [m["tool_calls"][0] for m in messages[1::2]], "content": answer}),
    ):
        result = await score(truth, output)
        assert result.r_traj == 1.0 and result.r_state == 1.0, result.missing
        assert result.reward == 1.0
        assert result.malformed == result.unknown_tools == 0
        assert result.tool_errors + result.bad_arguments == sum(c["is_error"] for c in truth["calls"])


async def test_a_trajectory_record_scores_its_own_calls_as_one() -> None:
    record = executed_trajectory("bank", "pay_new_payee_chain")
    async with Runtime() as rt:
        result = await Scorer(rt).score(record, None, oracle=True)
    assert (result.r_traj, result.r_state) == (1.0, 1.0)
    assert result.expected_calls == sum(not c.is_error for c in record.calls)


async def test_a_missing_write_loses_trace_and_state() -> None:
    truth = scenario_truth("bank", "pay_new_payee_chain")
    calls = [c for c in truth["calls"] if c["tool"] != "pay_payee"]
    result = await score(truth, as_tool_call_tags(calls))
    assert result.r_state == 0.0 and not result.states[0].equal
    assert result.r_traj == pytest.approx(1 - 1 / result.expected_calls)
    assert result.missing == ["bank.pay_payee"]
    assert result.reward == pytest.approx(0.5 * result.r_traj)


async def test_partial_state_gives_entity_level_credit() -> None:
    truth = scenario_truth("bank", "pay_new_payee_chain")
    writes = [c for c in truth["calls"] if c["tool"] in ("add_payee", "pay_payee") and not c["is_error"]]
    exact = await score(truth, as_tool_call_tags(writes[:2]))
    partial = await score(truth, as_tool_call_tags(writes[:2]), partial_state=True)
    assert exact.r_state == 0.0
    assert 0.0 < partial.r_state < 1.0
    assert partial.states[0].differing, "the entities that differ are named"


async def test_masked_arguments_and_numeric_tolerance() -> None:
    truth = scenario_truth("bank", "pay_new_payee_chain")
    pay = next(c for c in truth["calls"] if c["tool"] == "pay_payee" and not c["is_error"])
    text_args = [k for k, v in pay["arguments"].items() if isinstance(v, str) and k in ("reference", "memo")]
    amount_key = next(
        k for k, v in pay["arguments"].items() if isinstance(v, int | float) and not isinstance(v, bool)
    )
    changed = copy.deepcopy(truth["calls"])
    target = next(c for c in changed if c is not None and c["tool"] == "pay_payee" and not c["is_error"])
    target["arguments"][amount_key] = pay["arguments"][amount_key] * (1 + 1e-9)
    assert (await score(truth, as_tool_call_tags(changed), gamma=0)).r_traj == 1.0
    target["arguments"][amount_key] = pay["arguments"][amount_key] + 1
    assert (await score(truth, as_tool_call_tags(changed), gamma=0)).r_traj < 1.0
    if text_args:
        target["arguments"][amount_key] = pay["arguments"][amount_key]
        target["arguments"][text_args[0]] = "something else entirely"
        assert (await score(truth, as_tool_call_tags(changed), gamma=0)).r_traj < 1.0
        masked = copy.deepcopy(truth)
        next(c for c in masked["calls"] if c["tool"] == "pay_payee" and not c["is_error"])["masked"] = [
            text_args[0]
        ]
        assert (await score(masked, as_tool_call_tags(changed), gamma=0)).r_traj == 1.0


async def test_order_matters_only_when_asked() -> None:
    truth = scenario_truth("calendar", "tidy_up_the_week")
    reads = [c for c in truth["calls"] if not c["is_error"]]
    shuffled = reads[::-1]
    assert (await score(truth, as_tool_call_tags(shuffled))).r_traj == 1.0
    ordered = await score(truth, as_tool_call_tags(shuffled), ordered=True)
    assert ordered.r_traj < 1.0


async def test_extra_calls_cost_the_length_penalty() -> None:
    truth = scenario_truth("bank", "pay_new_payee_chain")
    ok = [c for c in truth["calls"] if not c["is_error"]]
    read = next(c for c in ok if c["tool"] == "get_balance")
    n = len(truth["calls"])  # the oracle's calls, its failed attempt included
    half = await score(truth, as_tool_call_tags(ok + [read] * (n - len(ok) + n // 2)), gamma=0.25)
    assert half.p_length == pytest.approx((n // 2) / n)
    padded = await score(truth, as_tool_call_tags(ok + [read] * 3 * n), gamma=0.25)
    assert padded.p_length == 1.0, "capped"
    assert padded.reward == pytest.approx(0.75)


async def test_unknown_tools_bad_arguments_and_malformed_calls_are_counted() -> None:
    truth = scenario_truth("bank", "pay_new_payee_chain")
    ok = [c for c in truth["calls"] if not c["is_error"]]
    output = (
        as_tool_call_tags(ok)
        + '<tool_call>{"name": "launch_rocket", "arguments": {}}</tool_call>'
        + '<tool_call>{"name": "get_balance", "arguments": {"no_such_argument": 1}}</tool_call>'
        + '<tool_call>{"name": "get_balance", "arguments": {oops</tool_call>'
        + '<tool_call>{"arguments": {}}</tool_call>'
        + '<tool_call>{"name": "weather.get_forecast", "arguments": {}}</tool_call>'
        + '<tool_call>{"name": "get_balance", "arguments": "{not json"}</tool_call>'
        + "<tool_call>[1, 2"
    )
    result = await score(truth, output)
    assert result.unknown_tools == 2
    assert result.bad_arguments == 1
    assert result.malformed == 4
    assert result.p_format == pytest.approx(4 / (len(ok) + 3 + 4))
    assert result.r_traj == 1.0 and result.r_state == 1.0
    assert any("not valid JSON" in p for p in result.problems)


async def test_multi_environment_records_route_qualified_and_bare_names() -> None:
    bank = scenario_truth("bank", "pay_new_payee_chain")
    cal = scenario_truth("calendar", "book_meeting_with_contact")
    truth = {
        "id": "bank+calendar",
        "envs": ["bank", "calendar"],
        "calls": [c for pair in zip(bank["calls"], cal["calls"], strict=False) for c in pair]
        + bank["calls"][len(cal["calls"]) :]
        + cal["calls"][len(bank["calls"]) :],
        "initial_states": {**bank["initial_states"], **cal["initial_states"]},
        "final_states": {**bank["final_states"], **cal["final_states"]},
    }
    for qualify in (".", "__", ""):
        result = await score(truth, as_tool_call_tags(truth["calls"], qualify=qualify), gamma=0)
        assert result.reward == 1.0, (qualify, result.missing)
        assert {s.env for s in result.states} == {"bank", "calendar"}
    only_bank = await score(truth, as_tool_call_tags(bank["calls"], qualify="__"), gamma=0)
    assert only_bank.r_state == 0.5
    assert [s.equal for s in only_bank.states] == [True, False]


def counter(value: int) -> dict:
    return load_environment(COUNTER).parse_state({"value": value}).to_json()


async def test_a_sandbox_is_reused_with_the_next_records_state() -> None:
    calls = [{"env": "counter", "tool": "increment", "arguments": {"by": 2}}]
    base = {"envs": ["counter"], "calls": calls, "initial_states": {"counter": counter(0)}}
    first = {**base, "final_states": {"counter": counter(2)}}
    second = {**base, "initial_states": {"counter": counter(40)}, "final_states": {"counter": counter(42)}}
    async with Runtime() as rt:
        scorer = Scorer(rt, sources={"counter": COUNTER})
        for _ in range(3):
            assert (await scorer.score(first, as_tool_call_tags(calls))).r_state == 1.0
            assert (await scorer.score(second, as_tool_call_tags(calls))).r_state == 1.0
        assert len(rt.sandboxes) == 1


async def test_bad_ground_truth_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="not valid JSON"):
        await score("{nope", "")
    with pytest.raises(ValueError, match="missing"):
        await score({"envs": ["bank"], "calls": [], "initial_states": {}, "final_states": {}}, "")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.one_of(
        st.text(max_size=200),
        st.text(max_size=120).map(lambda t: f"<tool_call>{t}</tool_call>"),
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.text(max_size=10),
            lambda c: (
                st.lists(c, max_size=3)
                | st.dictionaries(
                    st.sampled_from(["name", "arguments", "tool_calls", "function", "role", "env", "by"]),
                    c,
                    max_size=4,
                )
            ),
            max_leaves=12,
        ),
    )
)
def test_any_output_gives_a_reward_in_range_never_an_exception(output) -> None:
    import anyio

    calls = [{"env": "counter", "tool": "increment", "arguments": {"by": 3}}]
    truth = {
        "envs": ["counter"],
        "calls": calls,
        "initial_states": {"counter": counter(0)},
        "final_states": {"counter": counter(3)},
    }

    async def run():
        return await score(truth, output)

    result = anyio.run(run)
    assert 0.0 <= result.reward <= 1.0
    assert result.predicted_calls + result.malformed >= 0


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-5, 5)
    | st.sampled_from([0.0, 1.0, 2.5, -0.0])
    | st.sampled_from(["", "a", "1"]),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.sampled_from(["a", "b", "c"]), c, max_size=3),
    max_leaves=8,
)


NUMBERS = st.sampled_from(
    [0, 1, -1, 2.5, 1.0, -0.0, 2**53, float(2**53), 2**53 + 1, 1e16, 10**16, True, False]
)
PYTHON = st.recursive(  # what Python code hands over: tuples, int keys, floats that JSON writes as integers
    st.none() | NUMBERS | st.sampled_from(["", "a", "1"]),
    lambda c: (
        st.lists(c, max_size=3)
        | st.tuples(c, c)
        | st.dictionaries(st.sampled_from(["a", "b", "1"]) | st.sampled_from([1, 2]), c, max_size=3)
    ),
    max_leaves=8,
)


@settings(max_examples=500, deadline=None)
@given(JSON, JSON)
def test_state_equality_is_canonical_equality(a, b) -> None:
    from envreg.canonical import canonical_equal, canonical_json

    assert canonical_equal(a, b) == (canonical_json(a) == canonical_json(b))
    assert canonical_equal(a, a)


@settings(max_examples=500, deadline=None)
@given(PYTHON, PYTHON)
def test_canonical_equality_holds_for_python_values_too(a, b) -> None:
    from envreg.canonical import canonical_equal, canonical_json

    if any(isinstance(v, dict) and {1, "1"} <= v.keys() for v in _containers(a, b)):
        return  # two keys that JSON writes alike: the last one written wins, which comparing keys cannot see
    assert canonical_equal(a, b) == (canonical_json(a) == canonical_json(b))


def _containers(*values):
    for value in values:
        if isinstance(value, dict):
            yield value
            yield from _containers(*value.values())
        elif isinstance(value, list | tuple):
            yield from _containers(*value)


@settings(max_examples=300, deadline=None)
@given(JSON, JSON, st.lists(st.sampled_from(["a", "b.c", "*.a", "a.*", "*"]), max_size=2))
def test_states_equal_is_canonical_equality_without_the_volatile_paths(a, b, volatile) -> None:
    """As a comparison of the canonical JSON read back, with the volatile paths dropped, then written again."""
    import json

    from envreg.canonical import canonical_json
    from envreg.env.scenario import states_equal

    def drop(node, parts):  # in place, on the JSON read back: the reference the library's copies must match
        head, rest = parts[0], parts[1:]
        if head == "*" and isinstance(node, dict | list):
            if not rest:
                node.clear()
            for child in node.values() if isinstance(node, dict) else node:
                drop(child, rest)
        elif isinstance(node, dict) and head in node:
            if rest:
                drop(node[head], rest)
            else:
                del node[head]

    def text(state):
        data = json.loads(canonical_json(state))
        for path in volatile:
            drop(data, path.split("."))
        return canonical_json(data)

    assert states_equal(a, b, volatile) == (text(a) == text(b))


async def test_an_invalid_initial_state_fails_that_record_only() -> None:
    good = scenario_truth("bank", "pay_new_payee_chain")
    bad = copy.deepcopy(good)
    next(iter(bad["initial_states"]["bank"]["accounts"].values()))["balance"] = "lots"
    async with Runtime() as rt:
        scorer = Scorer(rt)
        assert (await scorer.score(good, as_tool_call_tags(good["calls"]))).reward == 1.0
        with pytest.raises(ValueError, match="invalid state"):
            await scorer.score(bad, as_tool_call_tags(good["calls"]))
        assert (await scorer.score(good, as_tool_call_tags(good["calls"]))).reward == 1.0
        assert len(rt.sandboxes) == 1, "the sandbox that refused the state is reused"
