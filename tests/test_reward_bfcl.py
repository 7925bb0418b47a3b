"""The reward agrees with BFCL's `multi_turn_checker` on BFCL's 800 multi-turn ground truths and corrupted variants.

Each entry is scored turn by turn, as BFCL checks it: a turn's record starts from the oracle's state
before the turn (the ground truth executed through the foreign-environment adapter) and ends in its
state after; the reward's verdict for the entry is "every turn with ground truth scores 1". BFCL's
verdict is its own checker on the same call strings (`envreg.adapters.bfcl_replay.bfcl_verdict`).

Needs the foreign-environment adapter (`envreg.adapters.bfcl`) and `bfcl-eval`; skipped without them.
About 80 s on 2 cores for the four variants (3,200 entry replays, local tier).
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import anyio
import pytest
from conftest import bfcl_entries, scaled

from envreg.adapters import bfcl
from envreg.adapters.bfcl_replay import bfcl_verdict, expected_run, model_turns, reset_bfcl_globals
from envreg.reward.score import Scorer
from envreg.runtime import Runtime


def turn_records(entry: Any) -> list[tuple[int, dict[str, Any]]]:
    """Per turn with ground truth: its index and its record (calls parsed through the adapter)."""
    reset_bfcl_globals()
    initial = {c: bfcl.initial_state(c, entry.initial_config, entry.long_context) for c in entry.classes}
    expected = expected_run(entry, initial)
    envs = [bfcl.env_name(c) for c in entry.classes]
    before = initial
    out = []
    for k, turn in enumerate(entry.ground_truth):
        after = expected.states[k]
        if turn:
            calls = [bfcl.parse_call(source, entry.classes) for source in turn]
            record = {
                "id": f"{entry.id}#{k}",
                "envs": envs,
                "calls": [
                    {"env": bfcl.env_name(o), "tool": c.tool, "arguments": c.arguments} for o, c in calls
                ],
                "initial_states": {bfcl.env_name(c): before[c] for c in entry.classes},
                "final_states": {bfcl.env_name(c): after[c] for c in entry.classes},
                "volatile": {e: list(bfcl.VOLATILE) for e in envs},
            }
            out.append((k, record))
        before = after
    return out


def prediction(entry: Any, turn: list[str]) -> dict[str, Any]:
    """The model's calls of one turn, as tool-call JSON naming each call's environment."""
    calls = []
    for source in turn:
        owner, call = bfcl.parse_call(source, entry.classes)
        calls.append({"env": bfcl.env_name(owner), "name": call.tool, "arguments": call.arguments})
    return {"calls": calls}


async def reward_verdict(scorer: Scorer, entry: Any, turns: list[list[str]]) -> tuple[bool, bool]:
    """(valid, states all equal): valid when every turn with ground truth has R_traj = R_state = 1."""
    valid = states = True
    for k, record in turn_records(entry):
        reset_bfcl_globals()
        result = await scorer.score(record, prediction(entry, turns[k]))
        valid = valid and result.r_traj == 1.0 and result.r_state == 1.0
        states = states and result.r_state == 1.0
    return valid, states


def corrupted(entry: Any, variant: str) -> list[list[str]]:
    """The ground truth with its last call dropped, repeated, or given a wrong argument value."""
    if variant in ("ground-truth", "drop-last"):
        return model_turns(entry, variant)  # type: ignore[arg-type]
    turns = [list(t) for t in entry.ground_truth]
    last = max((i for i, t in enumerate(turns) if t), default=None)
    if last is None:
        return turns
    source = turns[last][-1]
    if variant == "repeat-last":
        turns[last].append(source)
        return turns
    _, call = bfcl.parse_call(source, entry.classes)
    arguments = dict(call.arguments)
    for key, value in arguments.items():
        if isinstance(value, bool):
            arguments[key] = not value
        elif isinstance(value, int | float):
            arguments[key] = value + 7
        elif isinstance(value, str):
            arguments[key] = value + "_x"
        else:
            continue
        break
    else:
        return turns  # nothing to change: the entry stays the ground truth
    turns[last][-1] = f"{call.tool}({', '.join(f'{k}={v!r}' for k, v in arguments.items())})"
    return turns


def agreement(variant: str, entries: list[Any]) -> tuple[Counter[str], list[tuple[str, bool]]]:
    """Verdict pairs counted, and the entries where they differ (with: did the states all match?)."""

    async def main() -> tuple[Counter[str], list[tuple[str, bool]]]:
        counts: Counter[str] = Counter()
        disagree = []
        sources = {bfcl.env_name(c): bfcl.environment(c) for c in bfcl.CLASSES}
        async with Runtime() as rt:
            scorer = Scorer(rt, sources=sources)
            for i, entry in enumerate(entries):
                turns = corrupted(entry, variant)
                ours, states_equal = await reward_verdict(scorer, entry, turns)
                theirs = bfcl_verdict(entry, turns, f"envreg_reward_{variant}_{i}").valid
                counts[
                    f"reward {'valid' if ours else 'invalid'} / bfcl {'valid' if theirs else 'invalid'}"
                ] += 1
                if ours != theirs:
                    disagree.append((entry.id, states_equal))
        return counts, disagree

    return anyio.run(main)


@pytest.fixture(scope="module")
def entries() -> list[Any]:
    return bfcl_entries()  # all 800 under `scripts/test --full`


@pytest.mark.slow
def test_the_reward_agrees_with_bfcl_on_its_800_ground_truths(entries) -> None:
    assert len(entries) == scaled(800, 160)
    counts, disagree = agreement("ground-truth", entries)
    print(json.dumps(counts))
    assert disagree == [], counts
    assert counts["reward valid / bfcl valid"] == len(entries)


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["drop-last", "repeat-last"])
def test_the_reward_agrees_with_bfcl_on_corrupted_ground_truths(entries, variant) -> None:
    counts, disagree = agreement(variant, entries)
    print(variant, json.dumps(counts))
    assert disagree == [], counts
    # of 800: at least 700 and 200
    share = 7 / 8 if variant == "drop-last" else 1 / 4
    assert counts["reward invalid / bfcl invalid"] >= share * len(entries)


@pytest.mark.slow
def test_a_wrong_argument_is_caught_even_when_bfcl_cannot_see_it(entries) -> None:
    """BFCL compares outcomes, the reward's trace compares calls: an argument changed to a value that
    gives the same result and state (``ls(a=False)`` in a folder without hidden files) passes BFCL's
    checker and fails the trace. Those are the only disagreements, and the states agree there."""
    counts, disagree = agreement("wrong-argument", entries)
    print("wrong-argument", json.dumps(counts), disagree)
    assert counts["reward valid / bfcl invalid"] == 0
    assert counts["reward invalid / bfcl valid"] == len(disagree) <= 10
    assert all(states_equal for _, states_equal in disagree)
    assert counts["reward invalid / bfcl invalid"] >= 3 / 4 * len(entries)  # of 800: at least 600
