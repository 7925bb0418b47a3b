"""Tool results and arguments match the JSON Schemas the environments publish, formats included.

Clients in other languages (the TypeScript MCP SDK with ajv, the MCP Inspector) validate every
`structuredContent` against the tool's `outputSchema` with format checking on; a naive time declared
`format: date-time` (RFC 3339 needs an offset) makes them reject the result. These tests run every
scenario of every environment under `images/` and check what was really returned.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, time
from typing import Any

import pytest
from conftest import REFERENCE_ENVS
from jsonschema import Draft202012Validator
from pydantic import AwareDatetime, BaseModel, NaiveDatetime

from envreg.env import Environment, EnvState, load_environment, load_scenarios
from envreg.env.schema import json_schema
from envreg.manifest import build_manifest

FORMATS = Draft202012Validator.FORMAT_CHECKER


def validator(schema: dict[str, Any]) -> Draft202012Validator:
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema, format_checker=FORMATS)


def formats_in(node: Any) -> set[str]:
    if isinstance(node, dict):
        found = {node["format"]} if isinstance(node.get("format"), str) else set()
        return found.union(*(formats_in(v) for v in node.values()))
    if isinstance(node, list):
        return set().union(*(formats_in(v) for v in node))
    return set()


def problems(v: Draft202012Validator, instance: Any) -> list[str]:
    return [
        f"{'/'.join(str(p) for p in e.absolute_path) or '(root)'}: {e.message[:300]}"
        for e in v.iter_errors(instance)
    ]


def test_the_format_checks_the_schemas_rely_on_are_active() -> None:
    """jsonschema checks `date-time` and `time` only when rfc3339-validator is installed."""
    used = set().union(*(formats_in(build_manifest(load_environment(n)).to_json()) for n in REFERENCE_ENVS))
    assert {"date-time", "time", "date", "duration", "uri", "email"} <= set(FORMATS.checkers)
    assert used <= set(FORMATS.checkers), f"formats nobody checks: {used - set(FORMATS.checkers)}"
    assert not FORMATS.conforms("2026-01-07T13:00:00", "date-time"), "RFC 3339 needs an offset"
    assert not FORMATS.conforms("09:00:00", "time")


@pytest.mark.parametrize("name", REFERENCE_ENVS)
def test_every_scenario_call_matches_the_published_schemas(name: str) -> None:
    env = load_environment(name)
    manifest = build_manifest(env).to_json()
    inputs = {t["name"]: validator(t["inputSchema"]) for t in manifest["tools"]}
    outputs = {t["name"]: validator(t["outputSchema"]) for t in manifest["tools"] if "outputSchema" in t}
    state_schema = validator(manifest["state_schema"])
    scenarios, _ = load_scenarios(env.folder)
    failures: list[str] = []
    checked = 0
    for scenario in scenarios:
        instance = env.instance(scenario.initial_state)
        for problem in problems(state_schema, instance.state.to_json()):
            failures.append(f"{scenario.name}: initial state: {problem}")
        for i, step in enumerate(scenario.steps, 1):
            result = instance.call_tool(step.tool, step.arguments).to_mcp()
            where = f"{scenario.name} step {i} ({step.tool})"
            if result["isError"]:
                continue  # refused calls carry no structured result; their arguments may be bad on purpose
            checked += 1
            for problem in problems(inputs[step.tool], step.arguments):
                failures.append(f"{where}: the server accepted arguments its inputSchema refuses: {problem}")
            if step.tool in outputs:
                structured = result.get("structuredContent")
                if structured is None:
                    failures.append(f"{where}: no structuredContent although the tool has an outputSchema")
                    continue
                for problem in problems(outputs[step.tool], structured):
                    failures.append(f"{where}: result does not match its outputSchema: {problem}")
        for problem in problems(state_schema, instance.state.to_json()):
            failures.append(f"{scenario.name}: final state: {problem}")
    assert checked > 0
    assert not failures, f"{len(failures)} mismatches:\n" + "\n".join(failures[:40])


class _Times(BaseModel):
    naive: NaiveDatetime
    aware: AwareDatetime
    either: datetime
    day: date
    clock: time


def test_naive_times_are_not_declared_rfc3339() -> None:
    schema = json_schema(_Times)
    props = schema["properties"]
    assert props["aware"]["format"] == "date-time"
    assert props["day"]["format"] == "date"
    for field in ("naive", "either", "clock"):
        assert "format" not in props[field], (field, props[field])
        assert "offset" in props[field]["description"]
    v = validator(schema)
    naive = datetime(2026, 1, 7, 13, 0)
    good = _Times(naive=naive, aware=naive.replace(tzinfo=UTC), either=naive, day=naive.date(), clock=time(9))
    assert problems(v, good.model_dump(mode="json")) == []
    with_micro = good.model_copy(update={"naive": naive.replace(microsecond=5)})
    assert problems(v, with_micro.model_dump(mode="json")) == []
    bad = {**good.model_dump(mode="json"), "naive": "2026-01-07T13:00:00Z", "aware": "2026-01-07T13:00:00"}
    assert {p.split(":")[0] for p in problems(v, bad)} == {"naive", "aware"}
    aware_either = {**good.model_dump(mode="json"), "either": "2026-01-07T13:00:00+01:00"}
    assert problems(v, aware_either) == []


class _DueState(EnvState):
    due: NaiveDatetime | None = None


def test_one_generator_for_inputs_outputs_and_state() -> None:
    env = Environment("times", _DueState, version="0.0.1")

    @env.tool
    def set_due(state: _DueState, due: NaiveDatetime) -> NaiveDatetime:
        """Set the due time.

        Args:
            due: Local time.
        """
        state.due = due
        return due

    manifest = build_manifest(env).to_json()
    assert "date-time" not in formats_in(manifest), "a naive datetime was declared format: date-time"
    tool = manifest["tools"][0]
    assert tool["inputSchema"]["properties"]["due"]["pattern"]
    assert tool["outputSchema"]["properties"]["result"]["pattern"]
    assert manifest["state_schema"]["properties"]["now"]["pattern"]
