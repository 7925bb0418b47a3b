"""Turn-level verification of solved trajectories: each level rejects what it should, and a trajectory
keeps only the turns before its first rejected one."""

from __future__ import annotations

import itertools
import json

import anyio
import pytest
from synth_helpers import ScriptedModel, catalog_graph

from envreg.runtime import Runtime
from envreg.standin import StandInLLM
from envreg.synth.execute import Synthesizer
from envreg.synth.llm import LLMConfig
from envreg.synth.records import ExecutedCall, Trajectory, Turn, function_name
from envreg.synth.verify import kept, verify_turns

_ids = itertools.count()


@pytest.fixture(scope="module")
def oracles() -> list[Trajectory]:
    async def run():
        async with Runtime() as rt:
            return (await Synthesizer(rt, catalog_graph(), seed=3).run(12, concurrency=2)).trajectories

    return anyio.run(run)


def solved(oracle: Trajectory, turn: Turn, answer: str | None = None) -> Turn:
    """The turn as a model that made exactly the oracle's calls would have it (messages included)."""
    envs = [e.name for e in oracle.envs]
    messages = []
    for call in turn.calls:
        call_id = f"call_{next(_ids)}"
        fn = {"name": function_name(call.env, call.tool, envs), "arguments": json.dumps(call.arguments)}
        messages.append(
            {"role": "assistant", "content": None, "tool_calls": [{"id": call_id, "function": fn}]}
        )
        messages.append({"role": "tool", "tool_call_id": call_id, "content": json.dumps(call.result)})
    answer = turn.answer if answer is None else answer
    messages.append({"role": "assistant", "content": answer})
    return turn.model_copy(update={"messages": messages, "answer": answer})


def known(oracle: Trajectory) -> set[str]:
    envs = [e.name for e in oracle.envs]
    return {function_name(c.env, c.tool, envs) for c in oracle.calls}


def writes(oracle: Trajectory, k: int) -> bool:
    before = oracle.initial_state_sha256 if k == 0 else oracle.turns[k - 1].state_sha256
    return oracle.turns[k].state_sha256 != before


def read_only_turn(oracles: list[Trajectory]) -> tuple[Trajectory, int]:
    """An oracle with a read-only turn (with facts) that is not its last one: a later turn writes."""
    for oracle in oracles:
        for k, turn in enumerate(oracle.turns[:-1]):
            if turn.facts and any(writes(oracle, j) for j in range(k + 1, len(oracle.turns))):
                return oracle, k
    raise AssertionError("no trajectory with a read-only turn before a writing one")


def test_a_read_the_model_skipped_is_rejected_though_the_final_state_is_right(oracles) -> None:
    oracle, k = read_only_turn(oracles)
    lazy = oracle.turns[k].model_copy(update={"calls": [], "answer": "Done!"})
    turns = [solved(oracle, t) for t in oracle.turns]
    turns[k] = solved(oracle, lazy)
    assert turns[-1].states == oracle.final_states, "the chain still ends in the oracle's state"
    verdicts = anyio.run(verify_turns, oracle, turns, known(oracle))
    assert [v.passed for v in verdicts] == [True] * k + [False]
    assert verdicts[k].level == "coverage" and "was not made in this turn" in verdicts[k].reason
    assert kept(verdicts) == k
    everything = anyio.run(verify_turns, oracle, [solved(oracle, t) for t in oracle.turns], known(oracle))
    assert kept(everything) == len(oracle.turns)


def test_a_read_answered_without_its_facts_is_rejected(oracles) -> None:
    oracle, k = read_only_turn(oracles)
    turns = [solved(oracle, t) for t in oracle.turns]
    turns[k] = solved(oracle, oracle.turns[k], answer="Done, all good.")
    verdict = anyio.run(verify_turns, oracle, turns, known(oracle))[k]
    assert verdict.level == "coverage" and "does not state" in verdict.reason


def test_format_execution_and_state_levels(oracles) -> None:
    oracle = next(t for t in oracles if any(writes(t, k) for k in range(len(t.turns))))
    first = solved(oracle, oracle.turns[0])
    unknown = first.model_copy(deep=True)
    unknown.messages[0]["tool_calls"][0]["function"]["name"] = "launch_rocket"
    no_answer = first.model_copy(update={"messages": first.messages[:-1]})
    failed = first.calls[-1].model_copy(update={"is_error": True, "result": "boom"})
    errored = first.model_copy(update={"calls": [*first.calls, failed]})
    k, write = next((k, t) for k, t in enumerate(oracle.turns) if writes(oracle, k))
    before = oracle.initial_states if k == 0 else oracle.turns[k - 1].states
    unchanged = solved(oracle, write).model_copy(update={"states": before})
    cases = {
        "format": ([unknown], 0),
        "execution": ([errored], 0),
        "state": ([solved(oracle, t) for t in oracle.turns[:k]] + [unchanged], k),
    }
    for level, (turns, at) in cases.items():
        verdict = anyio.run(verify_turns, oracle, turns, known(oracle))[at]
        assert verdict.level == level, (level, verdict)
    assert anyio.run(verify_turns, oracle, [no_answer], known(oracle))[0].level == "format"


@pytest.mark.parametrize("judge_ok", [True, False])
def test_the_judge_checks_a_turn_that_saw_an_erroneous_output(oracles, judge_ok) -> None:
    oracle = oracles[0]
    turn = solved(oracle, oracle.turns[0])
    first = turn.calls[0]
    wrong = ExecutedCall(
        env=first.env, tool=first.tool, arguments={}, result="Invalid arguments", is_error=True
    )
    retried = turn.model_copy(update={"calls": [wrong, *turn.calls]})
    model = ScriptedModel(judge_ok=judge_ok)
    with StandInLLM(model) as server:
        llm = LLMConfig(base_url=server.base_url, model="standin")
        verdict = anyio.run(verify_turns, oracle, [retried], known(oracle), llm)[0]
        clean = anyio.run(verify_turns, oracle, [turn], known(oracle), llm)[0]
    assert verdict.passed is judge_ok and (judge_ok or verdict.level == "judge")
    assert clean.passed and len(model.judged) == 1, "only the turn with an error is judged"
    assert "A tool returned an error" in model.judged[0] and oracle.turns[0].query in model.judged[0]
    assert anyio.run(verify_turns, oracle, [retried], known(oracle))[0].passed, "no LLM, no judge"
