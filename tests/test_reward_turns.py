"""Read-only turns judged on what the model obtained and said; a model's turns scored one by one."""

from __future__ import annotations

import pytest
from reward_helpers import as_openai_messages, as_tool_call_tags, scenario_truth, stepwise_trajectory

from envreg.reward.answer import missing_facts, value_facts
from envreg.reward.score import ScoreOptions, Scorer
from envreg.reward.truth import read_truth
from envreg.runtime import Runtime

pytestmark = pytest.mark.anyio


# ------------------------------------------------------------------------------------------ facts
def test_facts_are_found_however_the_answer_writes_them() -> None:
    balance = {"account_id": "acc_0001", "currency": "EUR", "balance_cents": 426156}
    assert value_facts(balance) == [[426156, 4261.56]]
    assert not missing_facts(value_facts(balance), "You have €4,261.56 in checking.")
    assert not missing_facts(value_facts(balance), "Balance: 426156 cents")
    assert missing_facts(value_facts(balance), "You have about €4,000.") == [[426156, 4261.56]]
    assert not missing_facts(value_facts({"temp_c": 21.37, "city": "Lyon"}), "Lyon: 21.4 °C")
    assert missing_facts(value_facts({"temp_c": 21.37}), "about 21 degrees"), "21.37 is not 21"
    day = value_facts({"title": "Dentist", "day": "2026-01-06"})
    assert day == [["Dentist"]]
    assert not missing_facts(value_facts("2026-01-06"), "It is on January 6.")
    payees = [{"id": "pay_1", "name": "Stadtwerke München"}, {"id": "pay_2", "name": "Lukas Schneider"}]
    assert not missing_facts(value_facts(payees), "Your payees: STADTWERKE MÜNCHEN and Lukas Schneider.")
    assert value_facts({"matches": []}) == value_facts([])
    assert not missing_facts(value_facts([]), "I found no such files.")
    assert missing_facts(value_facts([]), "I know where they are: a.txt"), "'no' only as a word"
    assert value_facts({"user_id": "USR002"}) == [["USR002"]], "an object's one field is its answer"
    assert value_facts({"file_content": "x" * 200}) == [], "a paragraph is content, not a fact"


# ------------------------------------------------------------------------------- read-only turns
def read_only_row(env: str, scenario: str, tool: str):
    record = stepwise_trajectory(env, scenario)
    truth = read_truth(record)
    return next(u for u in truth.units() if u.read_only and u.calls[0].tool == tool and u.facts)


async def test_a_read_only_turn_needs_the_results_and_an_answer_that_states_them() -> None:
    unit = read_only_row("bank", "daily_limit_raise_and_own_transfers", "get_balance")
    calls = [c.model_dump() for c in unit.calls]
    async with Runtime() as rt:
        scorer = Scorer(rt)
        right = await scorer.score(unit, as_tool_call_tags(calls, answer=unit.answer))
        assert (right.reward, right.r_response, right.r_answer, right.read_only) == (1.0, 1.0, 1.0, True)
        silent = await scorer.score(unit, as_tool_call_tags(calls))
        assert silent.r_answer == 0.0 and silent.missing_facts == unit.facts
        assert silent.reward == 0.5, "the right call, but the user was told nothing"
        blind = ScoreOptions(check_answer=False)  # a policy that never sees its calls' results
        assert (await scorer.score(unit, as_tool_call_tags(calls), blind)).reward == 1.0
        other = [{**calls[0], "arguments": {"account_id": "acc_0002"}}]
        wrong = await scorer.score(unit, as_tool_call_tags(other, answer=unit.answer))
        assert wrong.r_response == 0.0 and wrong.obtained_results == 0 and wrong.reward == 0.0
        nothing = await scorer.score(unit, as_openai_messages([], answer=unit.answer))
        assert nothing.gate == "no_calls" and nothing.reward == 0.0, "the facts without a call: guessed"
        await scorer.close()


async def test_results_are_replayed_for_records_that_do_not_keep_them() -> None:
    """Exports made before results were kept: the oracle's results come from replaying its calls."""
    truth = scenario_truth("papers", "follow_citations_and_authors", results=False)
    assert "result" not in truth["calls"][0]
    async with Runtime() as rt:
        scorer = Scorer(rt)
        right = await scorer.score(truth, as_tool_call_tags(truth["calls"], answer=truth["answer"]))
        assert right.read_only and right.reward == 1.0 and right.obtained_results == right.expected_calls
        half = truth["calls"][: len(truth["calls"]) // 2]
        short = await scorer.score(truth, as_tool_call_tags(half, answer=truth["answer"]))
        assert short.r_response < 1.0 and short.reward < 0.75
        assert (await scorer.score(truth, "")).reward == 0.0
        await scorer.close()


# ------------------------------------------------------------------------------- turn by turn
async def test_a_models_turns_are_scored_one_by_one() -> None:
    record = stepwise_trajectory("bank", "pay_new_payee_chain")
    units = read_truth(record).units()
    outputs = [as_tool_call_tags([c.model_dump() for c in u.calls], answer=u.answer) for u in units]
    skipped = next(k for k, u in enumerate(units) if u.read_only and u.required and k > 0)
    async with Runtime() as rt:
        scorer = Scorer(rt)
        right = await scorer.score_turns(record, outputs)
        assert right.reward == 1.0 and len(right.turns) == len(record.turns)
        assert [t.id for t in right.turns] == [f"{record.id}#{k}" for k in range(len(units))]
        lazy = await scorer.score_turns(record, [*outputs[:skipped], "Done!", *outputs[skipped + 1 :]])
        assert lazy.turns[skipped].gate == "no_calls" and lazy.turns[skipped].reward == 0.0
        assert all(t.reward == 1.0 for k, t in enumerate(lazy.turns) if k != skipped), (
            "a read skipped harms no other turn"
        )
        assert lazy.reward == pytest.approx((len(units) - 1) / len(units))
        oracle = await scorer.score_turns(record, [], oracle=True)
        assert oracle.reward == 1.0
        with pytest.raises(ValueError, match="one output per turn"):
            await scorer.score_turns(record, outputs[:1])
        await scorer.close()


async def test_a_tool_the_record_forbids_scores_zero() -> None:
    """The right final state, reached with one more call to a tool the task forbids."""
    record = stepwise_trajectory("bank", "pay_new_payee_chain")
    record.meta["forbidden_tools"] = ["bank.list_payees"]
    calls = [c.model_dump() for c in record.calls]
    customer = next(c.arguments["customer_id"] for c in record.calls if "customer_id" in c.arguments)
    peek = {"env": "bank", "tool": "list_payees", "arguments": {"customer_id": customer}}
    answer = record.turns[-1].answer
    async with Runtime() as rt:
        scorer = Scorer(rt)
        assert (await scorer.score(record, as_tool_call_tags(calls, answer=answer))).reward == 1.0
        result = await scorer.score(record, as_tool_call_tags([*calls, peek], answer=answer))
        assert result.r_state == 1.0 and result.gate == "forbidden_tool" and result.reward == 0.0
        assert result.forbidden_calls == 1
        await scorer.close()
