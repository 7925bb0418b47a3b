"""A revision's report: every failure as (stage, check, tool, scenario, step, expected, got, traceback tail).

Failures come from four places: the model's answer (``reply``), the sandbox inspection (``inspect``: import,
the tools against the metadata, scenarios recorded, rejected states), the image build (``build``) and
`envreg validate` on the image (``validate``: each failing check's evidence lines, with the scenario, step,
tool and the two values they name picked out).
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from envreg.envgen.spec import Spec

Stage = Literal["reply", "inspect", "build", "validate"]
_WHERE = re.compile(r"scenario (?P<scenario>[^\s,]+), step (?P<step>\d+) \((?P<tool>\w+)\)")
_SCENARIO = re.compile(r"\bscenario (?P<scenario>[^\s,:]+)[,:]")
_PROBLEM = re.compile(r"\bscenario [^\s,:]+[,:]|\btool '\w+'|\bstate \S+:|\brejected state\b|\bcontainer \d")
_TOOL = re.compile(r"\btool '(?P<tool>\w+)'")
_EXPECTED_GOT = re.compile(r"expected (?P<a>.+?), got (?P<b>.+)$")
_VERSUS = re.compile(r": (?P<a>[^:]+?) \((?P<la>[^()]+)\) vs (?P<b>.+?) \((?P<lb>[^()]+)\)(?:;|$)")
MAX_FAILURES = 40


class Failure(BaseModel):
    """One thing a revision got wrong, as the model is told it."""

    model_config = ConfigDict(extra="forbid")

    stage: Stage
    check: str
    message: str
    tool: str | None = None
    scenario: str | None = None
    step: int | None = None
    expected: Any = None
    got: Any = None
    traceback: str | None = None

    def brief(self) -> dict[str, Any]:
        """The failure without empty fields (what the model reads)."""
        return self.model_dump(exclude_none=True)


def from_evidence(check: str, line: str) -> Failure:
    """A validate evidence line as a failure: scenario, step and tool, and the two values it compares."""
    failure = Failure(stage="validate", check=check, message=line)
    if m := _WHERE.search(line):
        failure.scenario, failure.step, failure.tool = m["scenario"], int(m["step"]), m["tool"]
    elif m := _SCENARIO.search(line):
        failure.scenario = m["scenario"]
    if failure.tool is None and (m := _TOOL.search(line)):
        failure.tool = m["tool"]
    if m := _EXPECTED_GOT.search(line):
        failure.expected, failure.got = m["a"], m["b"]
    elif m := _VERSUS.search(line):
        (a, la), (b, lb) = (m["a"], m["la"]), (m["b"], m["lb"])
        if la == "got" or lb == "expected":
            (a, la), (b, lb) = (b, lb), (a, la)
        failure.expected, failure.got = f"{a} ({la})", f"{b} ({lb})"
    return failure


def from_validation(report: Any) -> list[Failure]:
    """The failures of an `envreg.validate.EnvReport`: one per problem a failing check names (its evidence lines
    about a scenario, a tool or a state; the other lines are counts, kept in the first failure's message)."""
    from envreg.validate import Status

    failures = []
    if report.error:
        failures.append(Failure(stage="validate", check="validate", message=report.error))
    for result in report.results:
        if result.status is not Status.FAIL:
            continue
        lines = [line for line in result.evidence if not line.startswith("... and ")]
        problems = [line for line in lines if _PROBLEM.search(line)] or lines or [result.summary]
        context = [line for line in lines if line not in problems]
        for i, line in enumerate(problems):
            message = f"{result.summary}: {line}" if line != result.summary else line
            if i == 0 and context:
                message += f" ({'; '.join(context)})"
            failures.append(from_evidence(result.name, message))
    return failures


# ------------------------------------------------------------------------------ tools vs metadata
def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, list):
        return "array"
    return "object" if isinstance(value, dict) else "string"


def _types(schema: dict[str, Any]) -> set[str]:
    """The JSON types a schema admits, null aside."""
    found: set[str] = set()
    kind = schema.get("type")
    if isinstance(kind, str):
        found.add(kind)
    elif isinstance(kind, list):
        found.update(k for k in kind if isinstance(k, str))
    elif "enum" in schema or "const" in schema:
        found.update(
            _json_type(v)
            for v in [*schema.get("enum", []), *([schema["const"]] if "const" in schema else [])]
        )
    for branch in (*schema.get("anyOf", []), *schema.get("oneOf", []), *schema.get("allOf", [])):
        if isinstance(branch, dict):
            found |= _types(branch)
    if "$ref" in schema and not found:
        found.add("object")
    found.discard("null")
    return found


def _compatible(wanted: set[str], served: set[str]) -> bool:
    if not wanted or not served:
        return True  # an untyped side admits anything
    widened = served | ({"integer"} if "number" in served else set())
    return wanted <= widened or (wanted == {"number"} and served == {"integer"})


def metadata_failures(spec: Spec, tools: list[dict[str, Any]]) -> list[Failure]:
    """Where the served tools (MCP wire form) differ from the metadata: missing tools, parameters missing or
    extra, required ones not required (or the reverse), JSON types that do not match."""
    served = {t["name"]: t for t in tools}
    failures = []

    def fail(tool: str, message: str, expected: Any = None, got: Any = None) -> None:
        failures.append(
            Failure(
                stage="inspect",
                check="envgen.metadata",
                message=message,
                tool=tool,
                expected=expected,
                got=got,
            )
        )

    for want in spec.tools:
        have = served.get(want.name)
        if have is None:
            fail(want.name, f"tool {want.name!r} of the metadata is missing", expected=want.input_schema)
            continue
        schema = have.get("inputSchema") or {}
        props = schema.get("properties") or {}
        for pname, pschema in want.parameters.items():
            if pname not in props:
                fail(want.name, f"tool {want.name!r}: parameter {pname!r} is missing", expected=pschema)
                continue
            wanted, got = _types(pschema), _types(_deref(schema, props[pname]))
            if not _compatible(wanted, got):
                fail(
                    want.name,
                    f"tool {want.name!r}: parameter {pname!r} is {'/'.join(sorted(got))}, the metadata says "
                    f"{'/'.join(sorted(wanted))}",
                    expected=pschema,
                    got=props[pname],
                )
        for pname in props:
            if pname not in want.parameters:
                fail(
                    want.name,
                    f"tool {want.name!r}: parameter {pname!r} is not in the metadata",
                    got=props[pname],
                )
        required, served_required = set(want.required), set(schema.get("required") or [])
        for pname in sorted(required - served_required):
            if pname in props:
                fail(
                    want.name,
                    f"tool {want.name!r}: parameter {pname!r} must be required",
                    expected="required",
                )
        for pname in sorted(served_required - required):
            if pname in want.parameters:
                fail(
                    want.name,
                    f"tool {want.name!r}: parameter {pname!r} must be optional (T | None = None)",
                    expected="optional",
                )
    return failures


def _deref(root: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        return (root.get("$defs") or {}).get(ref.removeprefix("#/$defs/"), schema)
    return schema


def for_model(failures: list[Failure]) -> list[dict[str, Any]]:
    """The failures as the revision request shows them (the first `MAX_FAILURES`, tracebacks kept short)."""
    shown = []
    for f in failures[:MAX_FAILURES]:
        item = f.brief()
        if f.traceback:
            item["traceback"] = "\n".join(f.traceback.splitlines()[-12:])
        shown.append(item)
    if len(failures) > MAX_FAILURES:
        shown.append(
            {"stage": "report", "check": "more", "message": f"{len(failures) - MAX_FAILURES} more failures"}
        )
    return shown
