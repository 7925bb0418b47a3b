"""Schema checks: every result seen in the scenarios validates against its tool's output schema with format
checking on, and the TypeScript MCP SDKs' validators accept every schema, argument and result."""

from __future__ import annotations

from typing import Any

from jsonschema import FormatChecker, SchemaError
from jsonschema.validators import validator_for

from envreg.validate.context import Context
from envreg.validate.core import Outcome, check, failed, skipped, verdict

FORMATS_NEEDED = ("date-time", "date", "time")
"""Formats that environments' schemas use and that must really be checked (not silently ignored)."""


def format_checker() -> FormatChecker:
    """jsonschema's format checker; refuses to run without the checkers that the formats above need."""
    checker = FormatChecker()
    missing = [f for f in FORMATS_NEEDED if f not in checker.checkers]
    if missing:
        raise RuntimeError(
            f"jsonschema cannot check the formats {', '.join(missing)} here: install rfc3339-validator"
        )
    return checker


def output_problems(schema: dict[str, Any], value: Any, checker: FormatChecker) -> list[str]:
    """Why `value` does not validate against `schema` (format checking on), one line per error."""
    cls = validator_for(schema)
    validator = cls(schema, format_checker=checker)
    lines = []
    for error in sorted(validator.iter_errors(value), key=lambda e: list(e.absolute_path)):
        where = ".".join(str(p) for p in error.absolute_path) or "(the result)"
        lines.append(f"{where}: {error.message}")
    return lines


def _shape(line: str) -> str:
    """A problem line with list indices and the offending value taken out: its kind, for grouping."""
    where, _, message = line.partition(": ")
    path = ".".join("*" if part.isdigit() else part for part in where.split("."))
    return f"{path}: {message.rsplit(' is ', 1)[-1]}"


@check(
    "schemas.output",
    "Every result seen in the scenarios validates against its output schema, formats checked.",
)
async def schemas_output(ctx: Context) -> Outcome:
    runs = await ctx.runs()
    checker = format_checker()
    problems: list[str] = []
    repeats: dict[tuple[str, str], int] = {}
    checked = 0
    bad_schemas: set[str] = set()
    for run in runs.scenarios:
        for step in run.steps:
            schema = ctx.tools.get(step.tool, {}).get("outputSchema")
            if step.result.is_error or schema is None or step.tool in bad_schemas:
                continue
            try:
                validator_for(schema).check_schema(schema)
            except SchemaError as exc:
                bad_schemas.add(step.tool)
                problems.append(
                    f"tool {step.tool!r}: its outputSchema is not a valid JSON Schema: {exc.message}"
                )
                continue
            structured = step.result.structured
            if structured is None:
                problems.append(
                    f"tool {step.tool!r} ({run.at(step)}): no structuredContent, yet it declares an outputSchema"
                )
                continue
            checked += 1
            for line in output_problems(schema, structured, checker):
                key = (step.tool, _shape(line))  # one line per tool and kind of problem, the rest counted
                if key not in repeats:
                    repeats[key] = 0
                    problems.append(f"tool {step.tool!r} ({run.at(step)}): {line}")
                else:
                    repeats[key] += 1
    if repeats and any(repeats.values()):
        problems.append(f"{sum(repeats.values())} more results break their schemas the same ways")
    if not checked and not problems:
        return skipped("no successful call of a tool with an output schema in the scenarios")
    tools = len({s.tool for r in runs.scenarios for s in r.steps if not s.result.is_error})
    evidence = [
        f"{checked} results of {tools} tools validated (jsonschema, formats {', '.join(FORMATS_NEEDED)} checked)"
    ]
    return verdict(
        problems, "every result matches its output schema", "results violate their output schemas", evidence
    )


@check(
    "schemas.ts_clients",
    "The TypeScript MCP SDKs' validators (v1 and v2) accept every schema, the scenarios' arguments and results.",
)
async def schemas_ts_clients(ctx: Context) -> Outcome:
    if not ctx.tools:
        return failed(ctx.manifest_problem or "the manifest lists no tools")
    runs = await ctx.runs()
    job: dict[str, Any] = {
        "tools": [
            {k: t[k] for k in ("name", "inputSchema", "outputSchema") if k in t} for t in ctx.tools.values()
        ],
        "arguments": [],
        "results": [],
    }
    for run in runs.scenarios:
        for step in run.steps:
            if step.result.is_error or step.tool not in ctx.tools:
                continue
            where = run.at(step)
            job["arguments"].append({"tool": step.tool, "where": where, "value": step.arguments})
            if step.result.structured is not None:
                job["results"].append({"tool": step.tool, "where": where, "value": step.result.structured})
    answer = await ctx.worker.check(job)
    problems = []
    grouped: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for p in answer["problems"]:
        grouped.setdefault((p["tool"], p["kind"]), []).append(p)
    for (tool, kind), found in grouped.items():
        clients = "/".join(sorted({p["client"] for p in found}))
        first = found[0]
        where = "" if first["where"] in ("inputSchema", "outputSchema") else f" ({first['where']})"
        error = first["error"] if len(first["error"]) <= 240 else first["error"][:239] + "…"
        more = len({p["where"] for p in found}) - 1
        problems.append(
            f"tool {tool!r}: {kind} by {clients}{where}: {error}" + (f" (and {more} more)" if more else "")
        )
    evidence = [f"{label}" for label in answer["clients"].values()]
    evidence.append(
        f"{answer['compiled']} schemas compiled, {answer['validated']} accepted arguments and results validated"
    )
    evidence += [f"warning: {w}" for w in answer["warnings"]]
    return verdict(
        problems,
        "the TypeScript SDKs accept every schema and value",
        "refused by TypeScript clients",
        evidence,
    )
