"""Turn-level verification of solved trajectories (COVERT's multi-level validation).

Each turn an LLM solved is checked against the executed oracle's turn, level by level; the first
level that fails rejects the turn, and a trajectory keeps only the turns before its first rejected
one (a later turn starts from the state the rejected one left):

- ``format``: the turn ends with an answer in words; every tool call names a tool of the
  environments, and a call whose JSON did not parse was followed by one that did;
- ``execution``: the last call of each tool in the turn succeeded (an error it recovered from is fine);
- ``state``: every environment's state after the turn is the oracle's after that turn (volatile paths
  ignored);
- ``coverage``: every call the oracle made in this turn was made in this turn (arguments as the tool
  reads them, masked ones free), and the answer of a read-only turn states its facts
  (`envreg.reward.answer`): a read the model skipped, answered with "Done!", is rejected here;
- ``judge``: where the turn saw an erroneous tool output, or its query is labelled problematic, the
  same OpenAI-compatible LLM judges whether the assistant handled it (retried or explained, never
  claimed a failed action; asked or declined instead of guessing); no verdict rejects the turn.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from typing import Any

from envreg.env import states_equal
from envreg.reward.answer import missing_facts
from envreg.reward.match import arguments_match, normalized_arguments
from envreg.synth.records import ExecutedCall, Trajectory, Turn

LEVELS = ("format", "execution", "state", "coverage", "judge")
INVALID_CALL = "Invalid tool call"
JUDGE_SYSTEM = (
    "You review conversations between a user and a tool-using assistant, for a training dataset. "
    'Answer with JSON only: {"ok": true or false, "reason": "<one sentence>"}.'
)
JUDGE_QUESTIONS = {
    "erroneous_output": (
        "A tool returned an error or an erroneous output in this turn. Did the assistant handle it well: "
        "retry with a correction, or tell the user what failed, and never claim that a failed action succeeded?"
    ),
    "problematic_query": (
        "The user's request is problematic ({label}). Did the assistant handle it well: ask for what is "
        "missing or explain why it cannot be done, instead of guessing or acting on it?"
    ),
}


@dataclass(frozen=True)
class Verdict:
    """What verification said of one turn: passed, or the level that rejected it and why."""

    turn: int
    level: str | None = None
    reason: str = ""

    @property
    def passed(self) -> bool:
        return self.level is None

    def to_json(self) -> dict[str, Any]:
        return {"turn": self.turn, "passed": self.passed, "level": self.level, "reason": self.reason}


@cache
def _environment(name: str):
    from envreg.env import load_environment

    try:
        return load_environment(name)
    except LookupError:
        return None


def _arguments(call: ExecutedCall | Any) -> dict[str, Any]:
    normalized = normalized_arguments(_environment(call.env), call.tool, call.arguments)
    return call.arguments if normalized is None else normalized


def check_format(turn: Turn, known: set[str]) -> str | None:
    """Why the turn's messages are not well formed, or None."""
    final = turn.messages[-1] if turn.messages else None
    if not final or final.get("role") != "assistant" or final.get("tool_calls") or not turn.answer.strip():
        return "the turn does not end with an answer in words"
    pending_invalid = 0
    replies = {
        m.get("tool_call_id"): m.get("content") or "" for m in turn.messages if m.get("role") == "tool"
    }
    for message in turn.messages:
        for call in message.get("tool_calls") or ():
            name = call["function"]["name"]
            if name not in known:
                return f"a call to {name!r}, which no environment of the trajectory has"
            if replies.get(call.get("id"), "").startswith(INVALID_CALL):
                pending_invalid += 1
            else:
                pending_invalid = 0
    if pending_invalid:
        return "a tool call whose arguments were not JSON was never made again"
    return None


def check_execution(turn: Turn) -> str | None:
    last: dict[tuple[str, str], ExecutedCall] = {}
    for call in turn.calls:
        last[(call.env, call.tool)] = call
    failed = [f"{env}.{tool}" for (env, tool), call in last.items() if call.is_error]
    return f"{', '.join(failed)} failed and was not made again successfully" if failed else None


def check_state(turn: Turn, oracle_turn: Turn, volatile: dict[str, list[str]]) -> str | None:
    differ = [
        env
        for env, state in oracle_turn.states.items()
        if not states_equal(turn.states.get(env), state, volatile.get(env, []))
    ]
    return f"the state of {', '.join(differ)} is not the oracle's after this turn" if differ else None


def check_coverage(turn: Turn, oracle_turn: Turn) -> str | None:
    made = [(c, _arguments(c)) for c in turn.calls if not c.is_error]
    skipped = []
    for want in (c for c in oracle_turn.calls if not c.is_error):
        expected = _arguments(want)
        if not any(
            c.env == want.env
            and c.tool == want.tool
            and arguments_match(expected, args, want.masked, 1e-6, 1e-9)
            for c, args in made
        ):
            skipped.append(f"{want.env}.{want.tool}")
    if skipped:
        return f"the oracle's {', '.join(skipped)} was not made in this turn"
    missing = missing_facts(oracle_turn.facts or [], turn.answer)
    if missing:
        return f"the answer does not state {', '.join(str(f[0]) for f in missing)}"
    return None


def judged_kind(turn: Turn, label: dict[str, Any] | None) -> tuple[str, str] | None:
    """Which judge question applies to the turn (with the label's text), if any."""
    if label and label.get("kind") == "problematic_query":
        return "problematic_query", str(label.get("problem", "problematic"))
    if any(c.is_error for c in turn.calls):
        return "erroneous_output", ""
    return None


async def ask_judge(llm, prompt: str) -> tuple[bool, str] | None:
    """The LLM's verdict on `prompt` (``{"ok": bool, "reason": str}``), or None when it gives none."""
    from envreg.synth.llm import chat_json

    def check(value: Any) -> None:
        if not isinstance(value, dict) or not isinstance(value.get("ok"), bool):
            raise ValueError('expected {"ok": true|false, "reason": "..."}')

    verdict = await chat_json(llm, JUDGE_SYSTEM, prompt, check)
    return None if verdict is None else (verdict["ok"], str(verdict.get("reason") or ""))


async def judge(llm, kind: str, query: str, messages: list[dict[str, Any]], label: str = "") -> str | None:
    """Ask the LLM whether the turn handled `kind` well; the reason it did not, or None when it did.

    A model that gives no verdict rejects the turn (nothing unverified is kept).
    """
    transcript = "\n".join(
        f"{m['role']}: {m.get('content') or json.dumps(m.get('tool_calls'), ensure_ascii=False)}"[:600]
        for m in messages
    )
    question = JUDGE_QUESTIONS[kind].format(label=label)
    verdict = await ask_judge(llm, f"User: {query}\n{transcript}\n\n{question}")
    if verdict is None:
        return "the judge gave no verdict"
    return None if verdict[0] else f"the judge: {verdict[1] or 'not handled well'}"


async def verify_turns(
    oracle: Trajectory, turns: list[Turn], known: set[str], llm=None, labels: list[Any] | None = None
) -> list[Verdict]:
    """Verdicts for `turns` (one attempt) against the oracle's, up to and including the first rejected one."""
    verdicts = []
    for k, (turn, oracle_turn) in enumerate(zip(turns, oracle.turns, strict=False)):
        reason = check_format(turn, known)
        level = "format"
        if reason is None:
            level, reason = "execution", check_execution(turn)
        if reason is None:
            level, reason = "state", check_state(turn, oracle_turn, oracle.volatile)
        if reason is None:
            level, reason = "coverage", check_coverage(turn, oracle_turn)
        if reason is None and llm is not None:
            label = labels[k] if labels and k < len(labels) else None
            if judged := judged_kind(turn, label):
                level, reason = "judge", await judge(llm, judged[0], turn.query, turn.messages, judged[1])
        verdicts.append(Verdict(k, level if reason else None, reason or ""))
        if reason:
            break
    return verdicts


def kept(verdicts: list[Verdict]) -> int:
    """How many turns a trajectory keeps: those before the first rejected one."""
    return next((v.turn for v in verdicts if not v.passed), len(verdicts))
