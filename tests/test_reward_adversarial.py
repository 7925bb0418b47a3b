"""The adversarial reward suite: on every RL row exported from every environment's scenarios, each way
of farming the reward stays under its bound, and the oracle's answer scores 1.0.

Rows come from the real export (`envreg.synth.export.rl_rows`) of the scenarios executed one step per
turn, so they are what a trainer reads; every prediction is scored in process on the local tier.
"""

from __future__ import annotations

import json
from functools import cache
from typing import Any

import pytest
from conftest import REFERENCE_ENVS
from reward_helpers import as_tool_call_tags, stepwise_trajectory

from envreg.env import load_environment, load_scenarios
from envreg.manifest import build_manifest
from envreg.reward.score import Scorer
from envreg.reward.truth import GroundTruth, read_truth
from envreg.runtime import Runtime
from envreg.synth.export import rl_rows

pytestmark = pytest.mark.anyio

ROWS_PER_ENV = 12
DOING_NOTHING = 0.1  # the bound for doing nothing, on every row of every export
BOUNDS = {
    "empty": DOING_NOTHING,
    "prose": DOING_NOTHING,
    "refusal": DOING_NOTHING,
    "malformed": DOING_NOTHING,
    "hallucinated": DOING_NOTHING,  # results and an answer made up, no call made
    "forbidden_tool": DOING_NOTHING,  # the right state, through a tool the task forbids
    "write_when_reading": DOING_NOTHING,  # the right reads, and a write nobody asked for
    "every_tool": 0.3,  # every tool of the environment once, with nothing known
    "wrong_answer": 0.5,  # the right reads, an answer that states something else
    "repeated": 0.9,  # the right calls, three times each
    "right_but_malformed": 0.95,  # the right calls and answer, and one call that cannot be read
}
PROSE = "Sure! I have taken care of everything you asked for."
REFUSAL = "I'm sorry, but I can't help with that request."


@cache
def rows(env: str) -> tuple[GroundTruth, ...]:
    """Up to ROWS_PER_ENV ground truths of the environment's RL export, half of them read-only turns
    (when it has that many), from its scenarios in order."""
    environment = load_environment(env)
    manifest = build_manifest(environment)
    read_only: list[GroundTruth] = []
    writes: list[GroundTruth] = []
    half = ROWS_PER_ENV // 2
    for scenario in load_scenarios(environment.folder)[0]:
        for row in rl_rows(stepwise_trajectory(env, scenario.name), {env: manifest}):
            truth = read_truth(row["reward_model"]["ground_truth"], row["extra_info"])
            (read_only if truth.read_only else writes).append(truth)
        if len(read_only) >= half and len(writes) >= half:
            break
    picked = read_only[:half] + writes[:half]
    spare = [t for t in read_only[half:] + writes[half:]]
    return tuple(picked + spare[: ROWS_PER_ENV - len(picked)])


def calls_of(truth: GroundTruth) -> list[dict[str, Any]]:
    return [{"env": c.env, "tool": c.tool, "arguments": c.arguments} for c in truth.calls]


def oracle(truth: GroundTruth) -> str:
    return as_tool_call_tags(calls_of(truth), answer=truth.answer)


def adversaries(truth: GroundTruth, tools: dict[str, dict[str, Any]]) -> dict[str, tuple[str, GroundTruth]]:
    """Each adversary's output for `truth`, and the truth it is scored against (one forbids a tool)."""
    calls = calls_of(truth)
    used = {c.tool for c in truth.calls}
    env = truth.envs[0]
    reads = [
        n for n, t in tools.items() if (t.get("annotations") or {}).get("readOnlyHint") and n not in used
    ]
    writes = [
        n for n, t in tools.items() if not (t.get("annotations") or {}).get("readOnlyHint") and n not in used
    ]
    malformed = "".join(f'<tool_call>{{"name": "{c["tool"]}", "arguments": {{oops</tool_call>' for c in calls)
    made_up = "".join(
        f"<tool_response>{json.dumps(c.result)}</tool_response>" for c in truth.calls if c.result is not None
    )
    out = {
        "empty": ("", truth),
        "prose": (PROSE, truth),
        "refusal": (REFUSAL, truth),
        "malformed": (malformed + " " + truth.answer, truth),
        "hallucinated": (f"{made_up} {truth.answer}", truth),
        "every_tool": (as_tool_call_tags([{"env": env, "tool": n, "arguments": {}} for n in tools]), truth),
        "repeated": (as_tool_call_tags(calls * 3, answer=truth.answer), truth),
        "right_but_malformed": (oracle(truth) + '<tool_call>{"name": "x", "arguments": {</tool_call>', truth),
    }
    if reads or writes:
        # the oracle's calls (so the right state), plus one call to a tool the task forbids
        forbidden = (reads or writes)[0]
        strict = truth.model_copy(update={"forbidden": [f"{env}.{forbidden}"]})
        extra = [*calls, {"env": env, "tool": forbidden, "arguments": {}}]
        out["forbidden_tool"] = (as_tool_call_tags(extra, answer=truth.answer), strict)
    if truth.read_only and truth.required and writes:
        extra = [*calls, {"env": env, "tool": writes[0], "arguments": {}}]
        out["write_when_reading"] = (as_tool_call_tags(extra, answer=truth.answer), truth)
    if truth.read_only and truth.required and truth.facts:
        out["wrong_answer"] = (
            as_tool_call_tags(calls, answer="I found it: 123456789 (the Zanzibar widget)."),
            truth,
        )
    return out


@pytest.mark.parametrize("env", REFERENCE_ENVS)
async def test_no_way_of_farming_the_reward_beats_its_bound(env) -> None:
    truths = rows(env)
    assert truths, f"{env}: its scenarios gave no RL rows"
    worst: dict[str, tuple[float, str]] = {}
    async with Runtime() as rt:
        scorer = Scorer(rt)
        for truth in truths:
            right = await scorer.score(truth, oracle(truth))
            assert right.reward == 1.0, (truth.id, right.gate, right.missing, right.missing_facts)
            tools = scorer._tools[env]
            for name, (output, against) in adversaries(truth, tools).items():
                got = await scorer.score(against, output)
                if got.reward > worst.get(name, (-1.0, ""))[0]:
                    worst[name] = (got.reward, truth.id)
        await scorer.close()
    over = {k: v for k, v in worst.items() if v[0] > BOUNDS[k]}
    assert not over, f"{env}: over their bounds (score, row): {over}"
    assert set(BOUNDS) - {"write_when_reading", "wrong_answer", "forbidden_tool"} <= worst.keys()
