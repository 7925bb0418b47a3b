"""Oracle-preserving augmentation of one instance's tool results (COVERT-style), deterministic from a seed.

An `Augmenter` sits between an agent and an `Instance` wherever tool results are produced (the
environment server's agent plane, the local tier), so it applies to any agent, MCP or not:

- **formats**: each tool answers in one of JSON, YAML, XML or markdown (chosen per tool from the seed);
- **noise**: irrelevant fields (request ids, latencies...) added to results, never removing any;
- **errors**: the first attempt of a call may fail with a transient error (timeout, rate limit,
  unavailable) *without running the tool*; a retry of the same call is never failed, so it gives
  the oracle result and the state is the oracle's;
- **distractors**: tools of other environments listed next to the real ones; calling one is an
  error result that leaves the state alone.

Nothing here can change what a tool does to the state, and the real tools keep their names and
input schemas, so the oracle's calls and final states are unchanged. Labels (what was applied to
each call) are kept in `log` for the trainer (the control plane serves them); the agent never sees them.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections import Counter
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema, field_validator

from envreg.env.tool import ToolResult
from envreg.errors import UnknownToolError

if TYPE_CHECKING:
    from envreg.env.environment import Instance

Format = Literal["json", "yaml", "xml", "markdown"]
FORMATS: tuple[Format, ...] = ("json", "yaml", "xml", "markdown")
ERROR_KINDS = {
    "timeout": "The request timed out before the service answered; nothing was done. Retry the call.",
    "rate_limited": "429 Too Many Requests: rate limit exceeded; nothing was done. Retry the call.",
    "unavailable": "503 Service Unavailable: the service is temporarily down; nothing was done. Retry the call.",
}
NOISE_FIELDS = ("request_id", "trace_id", "latency_ms", "served_by", "api_version", "cache")

DistractorTool = Annotated[
    dict[str, Any],
    WithJsonSchema(
        {
            "type": "object",
            "required": ["name", "inputSchema"],
            "properties": {"name": {"type": "string"}, "inputSchema": {"type": "object"}},
            "description": "An MCP tool definition (name, inputSchema, optional description).",
        }
    ),
]


class Augmentation(BaseModel):
    """What to apply to one instance; sent as JSON to ``PUT /instances/{id}/augmentation``."""

    model_config = ConfigDict(extra="forbid", strict=True)

    seed: int = Field(default=0, description="Every choice derives from it: same seed, same augmentation.")
    formats: list[Format] = Field(
        default_factory=lambda: ["json"], min_length=1, description="Output formats, one chosen per tool."
    )
    noise: float = Field(default=0.0, ge=0, le=1, description="Probability that a result gets noise fields.")
    errors: float = Field(
        default=0.0, ge=0, le=1, description="Probability that a call's first attempt fails transiently."
    )
    distractors: list[DistractorTool] = Field(
        default_factory=list, description="MCP tool definitions from other environments, listed as decoys."
    )

    @field_validator("distractors")
    @classmethod
    def _named(cls, tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for tool in tools:
            if not isinstance(tool.get("name"), str) or not isinstance(tool.get("inputSchema"), dict):
                raise ValueError("each distractor needs a string `name` and an object `inputSchema`")
        return tools


def unit(seed: int, *parts: object) -> float:
    """A deterministic number in [0, 1) from the seed and the parts (stable across processes)."""
    digest = hashlib.blake2b(json.dumps([seed, *parts], default=str).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


class Augmenter:
    """Applies an `Augmentation` to one instance's calls and keeps the label of each call."""

    def __init__(self, config: Augmentation, tools: list[dict[str, Any]]) -> None:
        self.config = config
        own = {t["name"] for t in tools}
        self.distractors = {t["name"]: t for t in config.distractors if t["name"] not in own}
        self.formats = {name: self.format_of(name) for name in own}
        self.tools = self._listing(tools)
        self.log: list[dict[str, Any]] = []
        self._seen: Counter[str] = Counter()

    def format_of(self, tool: str) -> Format:
        formats = self.config.formats
        return formats[int(unit(self.config.seed, "format", tool) * len(formats))]

    def _listing(self, tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The instance's tool list: decoys interleaved deterministically; no output schema where results may be reshaped."""
        listed = []
        for tool in tools:
            if self.config.noise > 0 or self.formats[tool["name"]] != "json":
                tool = {k: v for k, v in tool.items() if k != "outputSchema"}
            listed.append(tool)
        for name in sorted(self.distractors, key=lambda n: unit(self.config.seed, "place", n)):
            decoy = {k: v for k, v in self.distractors[name].items() if k != "outputSchema"}
            listed.insert(int(unit(self.config.seed, "at", name) * (len(listed) + 1)), decoy)
        return listed

    def reset(self) -> None:
        """A new episode: forget the calls seen and their labels."""
        self.log.clear()
        self._seen.clear()

    def call(self, instance: Instance, name: str, arguments: dict[str, Any] | None) -> ToolResult:
        """Run one call through the augmentation; raises `UnknownToolError` like the instance would."""
        seed = self.config.seed
        entry: dict[str, Any] = {"call": len(self.log), "tool": name}
        if name in self.distractors and name not in instance.env.tools:
            entry["kind"] = "distractor"
            self.log.append(entry)
            return ToolResult(error=f"{name} is not available in this environment; use one of its own tools")
        if name not in instance.env.tools:
            raise UnknownToolError(name, sorted(instance.env.tools))
        fingerprint = name + json.dumps(arguments or {}, sort_keys=True, default=str)
        attempt = self._seen[fingerprint]
        self._seen[fingerprint] += 1
        if attempt == 0 and self.config.errors > 0 and unit(seed, "error", fingerprint) < self.config.errors:
            kind = sorted(ERROR_KINDS)[int(unit(seed, "error-kind", fingerprint) * len(ERROR_KINDS))]
            entry.update(kind="injected_error", error=kind)
            self.log.append(entry)
            return ToolResult(error=ERROR_KINDS[kind])
        result = instance.call_tool(name, arguments)
        entry["kind"] = "tool_error" if result.is_error else "ok"
        if result.is_error:
            self.log.append(entry)
            return result
        value = result.value
        if self.config.noise > 0 and unit(seed, "noise", fingerprint, attempt) < self.config.noise:
            value, added = add_noise(value, seed, fingerprint, attempt)
            if added:
                entry["noise"] = added
        fmt = self.formats[name]
        if fmt != "json":
            entry["format"] = fmt
        self.log.append(entry)
        if fmt == "json" and "noise" not in entry:
            return result
        return ToolResult(value=value, rendered=render(value, fmt))  # pyright: ignore[reportArgumentType]

    def describe(self) -> dict[str, Any]:
        return {"config": self.config.model_dump(mode="json"), "labels": list(self.log)}


# noise ---------------------------------------------------------------------------------------------
def add_noise(value: Any, seed: int, *key: object) -> tuple[Any, list[str]]:
    """`value` with a few irrelevant fields added to its objects (never one it already has)."""
    count = 1 + int(unit(seed, "noise-count", *key) * 2)
    start = int(unit(seed, "noise-field", *key) * len(NOISE_FIELDS))
    names = [NOISE_FIELDS[(start + i) % len(NOISE_FIELDS)] for i in range(count)]

    def noise_value(name: str) -> Any:
        u = unit(seed, "noise-value", name, *key)
        return {
            "request_id": f"req_{int(u * 16**10):010x}",
            "trace_id": f"{int(u * 16**16):016x}",
            "latency_ms": round(5 + u * 400, 1),
            "served_by": f"api-{1 + int(u * 9)}",
            "api_version": f"v{1 + int(u * 3)}",
            "cache": "hit" if u < 0.5 else "miss",
        }[name]

    def into(obj: dict[str, Any]) -> dict[str, Any]:
        return {**obj, **{n: noise_value(n) for n in names if n not in obj}}

    if isinstance(value, dict):
        added = [n for n in names if n not in value]
        return into(value), added
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        added = [n for n in names if all(n not in v for v in value)]
        return [into(v) for v in value], added
    return value, []


# formats -------------------------------------------------------------------------------------------
def render(value: Any, fmt: Format) -> str:
    """The value as text in one of the formats (JSON as the server sends it by default)."""
    if fmt == "yaml":
        return to_yaml(value)
    if fmt == "xml":
        return to_xml(value)
    if fmt == "markdown":
        return to_markdown(value)
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


_PLAIN = re.compile(r"^[A-Za-z_][A-Za-z0-9_ .@/-]*$")
# what YAML may not carry raw in a double-quoted scalar: non-printables and its extra line breaks
_YAML_ESCAPE = re.compile("[\x7f-\x9f\u2028\u2029\ufffe\uffff]")
_XML_UNSAFE = re.compile("[^\x09\x0a\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_YAML_WORDS = {"true", "false", "yes", "no", "on", "off", "null", "y", "n", "~"}


def _yaml_scalar(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        if not math.isfinite(value):
            return json.dumps(str(value))
        text = json.dumps(value)
        mantissa, e, exponent = text.partition("e")
        return f"{mantissa}.0e{exponent}" if e and "." not in mantissa else text  # YAML 1.1 floats need a dot
    text = str(value)
    if _PLAIN.fullmatch(text) and text.lower() not in _YAML_WORDS and not text.endswith((" ", ".")):
        return text
    # a JSON string is a valid double-quoted YAML scalar, once YAML's own specials are escaped too
    return _YAML_ESCAPE.sub(lambda m: f"\\u{ord(m.group()):04x}", json.dumps(text, ensure_ascii=False))


def to_yaml(value: Any, indent: int = 0) -> str:
    """Block-style YAML for JSON data (every string quoted unless plainly safe)."""
    pad = "  " * indent
    if isinstance(value, dict):
        if not value:
            return pad + "{}"
        lines = []
        for key, item in value.items():
            head = f"{pad}{_yaml_scalar(str(key))}:"
            if isinstance(item, dict | list) and item:
                lines.append(head + "\n" + to_yaml(item, indent + 1))
            else:
                lines.append(f"{head} {to_yaml(item).strip()}")
        return "\n".join(lines)
    if isinstance(value, list):
        if not value:
            return pad + "[]"
        lines = []
        for item in value:
            if isinstance(item, dict | list) and item:
                body = to_yaml(item, indent + 1)
                lines.append(f"{pad}- " + body.lstrip())
            else:
                lines.append(f"{pad}- {to_yaml(item).strip()}")
        return "\n".join(lines)
    return pad + _yaml_scalar(value)


_XML_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")


def to_xml(value: Any, tag: str = "result") -> str:
    """XML with a `type` attribute on every non-string node, so that it reads back exactly.

    A key that is not an XML name becomes ``<field key="<JSON string>">``; a string XML cannot carry
    (control characters, carriage returns) is written as ``type="json"`` text.
    """
    from xml.sax.saxutils import escape, quoteattr  # here: it imports urllib and ssl, 14 ms at server start

    def node(tag: str, value: Any) -> str:
        name, attr = tag, ""
        if not _XML_NAME.fullmatch(tag) or tag.lower().startswith("xml"):
            name, attr = "field", f" key={quoteattr(json.dumps(tag))}"
        if isinstance(value, dict):
            inner = "".join(node(str(k), v) for k, v in value.items())
            return f'<{name}{attr} type="object">{inner}</{name}>'
        if isinstance(value, list):
            inner = "".join(node("item", v) for v in value)
            return f'<{name}{attr} type="list">{inner}</{name}>'
        if value is None:
            return f'<{name}{attr} type="null"/>'
        if isinstance(value, bool):
            return f'<{name}{attr} type="boolean">{"true" if value else "false"}</{name}>'
        if isinstance(value, int | float):
            return f'<{name}{attr} type="number">{json.dumps(value)}</{name}>'
        text = str(value)
        if _XML_UNSAFE.search(text):
            return f'<{name}{attr} type="json">{escape(json.dumps(text))}</{name}>'
        return f"<{name}{attr}>{escape(text)}</{name}>"

    return node(tag, value)


def _md_scalar(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return json.dumps(value)
    return str(value).replace("|", "\\|").replace("\n", " ")


def _flat(value: Any) -> bool:
    return not isinstance(value, dict | list)


def to_markdown(value: Any, depth: int = 0) -> str:
    """A table for a list of flat objects, bullets for everything else."""
    pad = "  " * depth
    if (
        isinstance(value, list)
        and value
        and all(isinstance(v, dict) and all(map(_flat, v.values())) for v in value)
    ):
        columns = list(dict.fromkeys(k for row in value for k in row))
        lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
        lines += ["| " + " | ".join(_md_scalar(row.get(c, "")) for c in columns) + " |" for row in value]
        return "\n".join(pad + line for line in lines)
    if isinstance(value, dict):
        if not value:
            return pad + "(empty)"
        lines = []
        for key, item in value.items():
            if _flat(item):
                lines.append(f"{pad}- **{key}**: {_md_scalar(item)}")
            else:
                lines.append(f"{pad}- **{key}**:\n" + to_markdown(item, depth + 1))
        return "\n".join(lines)
    if isinstance(value, list):
        if not value:
            return pad + "(none)"
        return "\n".join(
            f"{pad}- {_md_scalar(item)}" if _flat(item) else f"{pad}-\n" + to_markdown(item, depth + 1)
            for item in value
        )
    return pad + _md_scalar(value)
