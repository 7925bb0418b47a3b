"""Tool calls out of raw model output: ``<tool_call>`` tags, OpenAI tool-call JSON, chat transcripts.

Whatever the model wrote, parsing never raises: every call it can read becomes a `PredictedCall`,
everything else is a `Malformed` entry that says what was wrong, and what the model said besides its
calls is its answer (`ParsedOutput.text`; tags, and `<tool_response>` text it may have made up, left
out). Names may be qualified with the environment for multi-environment records
(``calendar.create_event``, ``calendar__create_event``, or an ``"env"`` key next to the name);
resolving them against the record's environments is the scorer's job.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

_TAG = re.compile(r"<tool_call>(.*?)(</tool_call>|(?=<tool_call>)|$)", re.DOTALL)
_NOT_ANSWER = re.compile(
    r"<tool_call>.*?(</tool_call>|(?=<tool_call>)|$)|<tool_response>.*?(</tool_response>|$)", re.DOTALL
)
_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)


@dataclass(slots=True)
class PredictedCall:
    """One call the model made; `env` is None when the name was not qualified."""

    tool: str
    arguments: dict[str, Any]
    env: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"env": self.env, "tool": self.tool, "arguments": self.arguments}


@dataclass(slots=True)
class Malformed:
    """A call attempt that could not be read, and why."""

    reason: str
    text: str

    def to_json(self) -> dict[str, str]:
        return {"reason": self.reason, "text": self.text[:200]}


@dataclass(slots=True)
class ParsedOutput:
    calls: list[PredictedCall] = field(default_factory=list)
    malformed: list[Malformed] = field(default_factory=list)
    text: str = ""  # the answer: what the model said besides its calls (the last assistant message's)

    @property
    def attempts(self) -> int:
        return len(self.calls) + len(self.malformed)


def parse_output(output: Any) -> ParsedOutput:
    """Read every tool call in `output`.

    `output` is model text (``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` tags, or a
    JSON document), an OpenAI message or message list (``tool_calls`` with ``function.arguments``
    as a JSON string), a list of calls, or ``{"calls": [...], "answer": "..."}``.
    """
    parsed = ParsedOutput()
    if output is None:
        return parsed
    if isinstance(output, str):
        _parse_text(output, parsed)
    else:
        _parse_value(output, parsed, top=True)
    return parsed


def _parse_text(text: str, parsed: ParsedOutput) -> None:
    answer = _NOT_ANSWER.sub(" ", text).strip()
    if "<tool_call>" in text:
        parsed.text = answer
        for match in _TAG.finditer(text):
            body = match.group(1).strip()
            if not match.group(2):
                parsed.malformed.append(Malformed("<tool_call> tag is not closed by </tool_call>", body))
                continue
            fence = _FENCE.match(body)
            _parse_json_call(fence.group(1) if fence else body, parsed)
        return
    stripped = text.strip()
    fence = _FENCE.match(stripped)
    if fence:
        stripped = fence.group(1)
    if stripped[:1] in ("{", "["):
        try:
            value = json.loads(stripped)
        except ValueError as exc:
            parsed.malformed.append(Malformed(f"output is not valid JSON: {exc}", stripped))
            return
        _parse_value(value, parsed, top=True)
        return
    parsed.text = answer


def _parse_json_call(body: str, parsed: ParsedOutput) -> None:
    try:
        value = json.loads(body)
    except ValueError as exc:
        parsed.malformed.append(Malformed(f"tool call is not valid JSON: {exc}", body))
        return
    if isinstance(value, list):
        for item in value:
            _parse_call(item, parsed)
    else:
        _parse_call(value, parsed)


def _parse_value(value: Any, parsed: ParsedOutput, top: bool = False) -> None:
    """A message, a list of messages or calls, or a calls document."""
    if isinstance(value, list):
        for item in value:
            _parse_value(item, parsed)
        return
    if not isinstance(value, dict):
        if top:
            parsed.malformed.append(Malformed("expected tool calls, got a JSON scalar", json.dumps(value)))
        return
    if "role" in value:  # a chat message: only the assistant's tool calls and words count
        if value.get("role") == "assistant":
            for call in value.get("tool_calls") or ():
                _parse_call(call, parsed)
            content = _content_text(value.get("content"))
            if "<tool_call>" in content:
                _parse_text(content, parsed)
            elif content.strip():
                parsed.text = _NOT_ANSWER.sub(" ", content).strip()
        return
    if "tool_calls" in value and isinstance(value["tool_calls"], list):
        for call in value["tool_calls"]:
            _parse_call(call, parsed)
        if content := _content_text(value.get("content")).strip():
            parsed.text = content
        return
    if "calls" in value and isinstance(value["calls"], list):
        for call in value["calls"]:
            _parse_call(call, parsed)
        if isinstance(value.get("answer"), str):
            parsed.text = value["answer"]
        return
    _parse_call(value, parsed)


def _content_text(content: Any) -> str:
    """A message's content as text (a string, or a list of ``{"type": "text", "text": ...}`` parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def _parse_call(item: Any, parsed: ParsedOutput) -> None:
    """One call in any of the shapes: OpenAI ``{"function": {...}}``, ``{"name", "arguments"}``, envreg ``{"tool", ...}``."""
    raw = json.dumps(item, ensure_ascii=False, default=str)
    if not isinstance(item, dict):
        parsed.malformed.append(Malformed("a tool call must be a JSON object", raw))
        return
    env = item.get("env")
    body = item.get("function") if isinstance(item.get("function"), dict) else item
    name = body.get("name", body.get("tool"))  # pyright: ignore[reportOptionalMemberAccess]
    if not isinstance(name, str) or not name.strip():
        parsed.malformed.append(Malformed("tool call has no name", raw))
        return
    arguments: Any = body.get("arguments", body.get("parameters", {}))  # pyright: ignore[reportOptionalMemberAccess]
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except ValueError as exc:
            parsed.malformed.append(Malformed(f"arguments of {name!r} are not valid JSON: {exc}", raw))
            return
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        parsed.malformed.append(Malformed(f"arguments of {name!r} must be a JSON object", raw))
        return
    if env is not None and not isinstance(env, str):
        parsed.malformed.append(Malformed(f"env of {name!r} must be a string", raw))
        return
    parsed.calls.append(PredictedCall(name.strip(), arguments, env))


def split_qualified(name: str, envs: list[str]) -> tuple[str | None, str]:
    """``calendar.create_event`` / ``calendar__create_event`` / ``calendar/create_event`` -> (env, tool)."""
    for sep in (".", "/", ":"):
        if sep in name:
            env, tool = name.rsplit(sep, 1)
            return env, tool
    if "__" in name:
        for env in envs:
            prefix = env.replace("-", "_") + "__"
            if name.startswith(prefix) or name.startswith(env + "__"):
                return env, name.split("__", 1)[1] if name.startswith(env + "__") else name[len(prefix) :]
    return None, name
