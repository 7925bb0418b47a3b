"""Scripted policies that play `envreg.rollout.Task`s: good, bad and malformed answers, no model.

A conversation is matched to its task by its first user message; the turn is the number of user
messages so far, and the calls already answered are the tool messages after the last one. Scripts:

- ``oracle``: the turn's oracle calls one at a time, then a short answer that says what the calls
  answered (a good model).
- ``parallel``: all of the turn's oracle calls in one message (parallel tool calls), then an answer.
- ``bad``: the oracle's tools with an argument they do not take (each call is refused), then an answer.
- ``malformed``: tool calls whose arguments are not JSON, then an answer.
- ``prose``: text that describes the calls instead of making them.
- ``refuse``: a refusal.
- ``flaky``: ``oracle`` when the request's ``seed`` is even (or absent), ``bad`` when it is odd, so
  that k trials of one task differ (pass^k below pass@1).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from envreg.standin.server import text, tool_calls

SCRIPTS = ("oracle", "parallel", "bad", "malformed", "prose", "refuse", "flaky")
DONE = "Done: everything you asked for is taken care of."
UNKNOWN = "The stand-in has no script for this conversation (its first user message matches no task)."
REFUSAL = "I'm sorry, but I can't help with that."


class Scripted:
    """A `Policy` for `StandInLLM` that plays `tasks` with one of `SCRIPTS`."""

    def __init__(self, tasks: Sequence[Any], script: str = "oracle") -> None:
        if script not in SCRIPTS:
            raise ValueError(f"unknown script {script!r}; choose from {', '.join(SCRIPTS)}")
        self.script = script
        self.tasks = {task.turns[0].user: task for task in tasks}

    def __call__(self, body: dict[str, Any]) -> dict[str, Any]:
        messages = body.get("messages") or []
        users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
        task = self.tasks.get(messages[users[0]].get("content")) if users else None
        if task is None:
            return text(UNKNOWN)
        turn = task.turns[min(len(users), len(task.turns)) - 1]
        answered = sum(1 for m in messages[users[-1] + 1 :] if m.get("role") == "tool")
        calls = [(task.function_name(c.env, c.tool), c.arguments) for c in turn.calls]
        script = self.script
        if script == "flaky":
            script = "bad" if int(body.get("seed") or 0) % 2 else "oracle"
        if script == "refuse":
            return text(REFUSAL)
        if script == "prose":
            listed = ", ".join(f"{name}({json.dumps(args)})" for name, args in calls) or "nothing"
            return text(f"To do this I would call: {listed}.")
        if answered >= len(calls):  # a good model tells the user what the tools answered
            results = [m.get("content") or "" for m in messages[users[-1] + 1 :] if m.get("role") == "tool"]
            return text(f"{DONE} The tools answered: {' | '.join(results)}" if results else DONE)
        if script == "parallel":
            return tool_calls(*((name, json.dumps(args)) for name, args in calls[answered:]))
        name, arguments = calls[answered]
        if script == "bad":
            return tool_calls((name, json.dumps({**arguments, "not_an_argument": True})))
        if script == "malformed":
            return tool_calls((name, '{"arguments": not json'))
        return tool_calls((name, json.dumps(arguments)))
