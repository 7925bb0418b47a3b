"""`envreg validate` logic that needs no engine: selection, diffs, schema and budget verdicts, reports, the
TypeScript validators' worker (real Node and SDK packages from npm), the CLI's usage errors."""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from conftest import FIXTURES
from typer.testing import CliRunner
from validate_helpers import NPM_CACHE

from envreg.cli.main import app
from envreg.env import Budgets, EnvState, RejectedState, Scenario, ToolResult, load_environment
from envreg.manifest import Manifest, build_manifest
from envreg.npm import NpmError
from envreg.validate import CHECKS, CheckResult, EnvReport, Status, select
from envreg.validate.budgets import latency_problems, percentile
from envreg.validate.core import GROUPS, failed, passed, skipped
from envreg.validate.jsondiff import describe, differences
from envreg.validate.manifest import tool_drift
from envreg.validate.report import to_json, to_junit
from envreg.validate.runs import ReadState, RejectionRecord, ScenarioRun, StepRecord
from envreg.validate.sandbox import _oversized
from envreg.validate.schemas import format_checker, output_problems
from envreg.validate.state import _first_divergence
from envreg.validate.target import Target
from envreg.validate.ts import SchemaWorker


# --- the checks and their selection --------------------------------------------------------------
def test_every_group_of_the_issue_has_checks_in_report_order() -> None:
    groups = [c.group for c in CHECKS.values()]
    assert groups == sorted(groups, key=GROUPS.index)
    assert set(groups) == set(GROUPS)
    assert {
        "manifest.tools",
        "manifest.restart",
        "schemas.output",
        "schemas.ts_clients",
        "state.determinism",
        "state.transactional",
        "sandbox.no_network",
        "sandbox.control_token",
        "budgets.latency",
    } <= set(CHECKS)


def test_select_by_name_group_and_glob() -> None:
    run, dropped = select(["state", "manifest.tools"], ["*.determinism"])
    names = [c.name for c in run]
    assert "manifest.tools" in names and "state.roundtrip" in names
    assert "state.determinism" not in names and "sandbox.non_root" not in names
    assert [c.name for c in dropped] == ["state.determinism"]  # reported as skipped; the rest not at all
    with pytest.raises(ValueError, match="'stat' matches no check"):
        select(["stat"])


# --- diffs ------------------------------------------------------------------------------------------
def test_differences_name_the_paths() -> None:
    a = {"notes": [{"id": "n_1", "tags": ["x"]}], "count": 1, "flag": True}
    b = {"notes": [{"id": "n_2", "tags": ["x", "y"]}], "count": 1.0, "flag": 1}
    found = {path: (left, right) for path, left, right in differences(a, b)}
    assert set(found) == {"notes.0.id", "notes.0.tags.1", "flag"}  # 1 == 1.0 canonically, true != 1
    text = describe(a, b, ("run 1", "run 2"))
    assert 'notes.0.id: "n_1" (run 1) vs "n_2" (run 2)' in text
    assert "(absent) (run 1)" in text
    assert describe({"a": 1}, {"a": 1}) == "no difference"


def test_tool_drift_names_tool_and_field() -> None:
    manifest = [
        {
            "name": "a",
            "description": "A.",
            "inputSchema": {"type": "object", "properties": {"x": {"type": "string"}}},
        },
        {"name": "b", "description": "B.", "inputSchema": {"type": "object"}},
    ]
    served = [
        {
            "name": "a",
            "description": "A.",
            "inputSchema": {"type": "object", "properties": {"x": {"type": "integer"}}},
        },
        {"name": "c", "description": "C.", "inputSchema": {"type": "object"}},
    ]
    problems = tool_drift(manifest, served, "era")
    assert "era: tool 'c' is served but not in the manifest" in problems
    assert "era: tool 'b' is in the manifest but not served" in problems
    assert any(
        p.startswith("era: tool 'a': inputSchema differs") and "properties.x.type" in p for p in problems
    )
    assert tool_drift(manifest, list(reversed(manifest)), "era") == [
        "era: tools are served in another order than the manifest's: b, a"
    ]
    assert tool_drift(manifest, manifest, "era") == []


# --- schema verdicts --------------------------------------------------------------------------------
def test_output_schema_check_checks_formats() -> None:
    checker = format_checker()
    schema = {
        "type": "object",
        "properties": {
            "due": {"type": "string", "format": "date-time"},
            "day": {"type": "string", "format": "date"},
        },
        "required": ["due"],
    }
    assert output_problems(schema, {"due": "2026-01-05T09:30:00Z", "day": "2026-01-05"}, checker) == []
    problems = output_problems(schema, {"due": "2026-01-05T09:30:00", "day": "05/01/2026"}, checker)
    assert problems == [
        "day: '05/01/2026' is not a 'date'",
        "due: '2026-01-05T09:30:00' is not a 'date-time'",
    ]
    assert output_problems(schema, {}, checker) == ["(the result): 'due' is a required property"]


# --- budgets ----------------------------------------------------------------------------------------
def test_percentile_is_nearest_rank() -> None:
    assert percentile([], 0.95) == 0.0
    assert percentile([5.0], 0.95) == 5.0
    values = [float(i) for i in range(1, 101)]
    assert percentile(values, 0.5) == 50.0
    assert percentile(values, 0.95) == 95.0


def test_latency_budget_names_the_slow_tools() -> None:
    fast = {"get": [1.0] * 40}
    assert latency_problems(fast, 50)[0] == []
    slow = {"get": [1.0] * 40, "search": [200.0] * 10}
    problems, evidence = latency_problems(slow, 50)
    assert problems == ["p95 latency 200 ms is over the budget of 50 ms; slowest: search (p95 200 ms)"]
    assert evidence[1].startswith("search: p95 200.0 ms over 10 calls")


def test_latency_takes_each_calls_best_of_its_two_plays() -> None:
    """A stall of the host in one play (a 3 s first call, seen in CI) is not the environment's latency; a call
    slow in both plays is."""
    from types import SimpleNamespace

    import anyio

    from envreg.env.budgets import DEFAULT_BUDGETS
    from envreg.validate.budgets import latency

    def play(*ms: float) -> ScenarioRun:
        steps = [StepRecord(i, "get", {}, None, value, {}, {}) for i, value in enumerate(ms)]  # type: ignore[arg-type]
        return ScenarioRun(scenario=None, steps=steps)  # type: ignore[arg-type]

    def outcome(first: ScenarioRun, second: ScenarioRun):
        async def runs():
            return SimpleNamespace(scenarios=[first])

        async def replays():
            return [second]

        ctx = SimpleNamespace(runs=runs, replays=replays, budgets=(DEFAULT_BUDGETS, False))
        return anyio.run(latency, ctx)

    stalled = outcome(play(3357.0, 5.0, 6.0), play(40.0, 5.0, 6.0))
    assert stalled.status is Status.PASS, stalled
    slow = outcome(play(3357.0, 5.0, 6.0), play(2900.0, 5.0, 6.0))
    assert slow.status is Status.FAIL and slow.evidence[0].startswith("p95 latency 2900 ms"), slow


def test_declared_budgets_are_published_only_when_declared() -> None:
    counter = load_environment(FIXTURES / "counter")
    assert "budgets" not in build_manifest(counter).to_json()["runtime"]
    slow = load_environment(FIXTURES / "broken" / "slow")
    manifest = build_manifest(slow).to_json()
    assert manifest["runtime"]["budgets"] == {"startup_ms": 30000, "call_ms": 50}
    assert Manifest.model_validate(manifest).runtime.budgets == Budgets(call_ms=50)
    with pytest.raises(ValueError):
        Budgets(call_ms=0)


# --- recorded runs ----------------------------------------------------------------------------------
def _step(i: int, tool: str, result: ToolResult, before: dict, after: dict) -> StepRecord:
    return StepRecord(i, tool, {}, result, 1.0, before, after)


def test_divergence_names_scenario_step_tool_and_path() -> None:
    scenario = Scenario(name="s", steps=[{"tool": "add", "arguments": {}}, {"tool": "add", "arguments": {}}])
    s0 = {"notes": {}}
    one = ScenarioRun(scenario, initial=s0)
    one.steps = [
        _step(1, "add", ToolResult(value="n_1"), s0, {"notes": {"n_1": "a"}}),
        _step(
            2, "add", ToolResult(value="n_2"), {"notes": {"n_1": "a"}}, {"notes": {"n_1": "a", "n_2": "b"}}
        ),
    ]
    two = ScenarioRun(scenario, initial=s0)
    two.steps = [
        _step(1, "add", ToolResult(value="n_1"), s0, {"notes": {"n_1": "a"}}),
        _step(
            2, "add", ToolResult(value="n_2"), {"notes": {"n_1": "a"}}, {"notes": {"n_1": "a", "n_9": "b"}}
        ),
    ]
    why = _first_divergence(one, two, [])
    assert why is not None and why.startswith("scenario s, step 2 (add): the state differs: notes.n_2")
    assert _first_divergence(one, one, []) is None
    assert _first_divergence(one, two, ["notes"]) is None  # volatile paths are ignored
    # states as a sandbox gives them (`ReadState`: each canonical text computed once, per set of volatile paths)
    read = [ScenarioRun(scenario, initial=ReadState(s0)) for _ in range(2)]
    for run, plain in zip(read, (one, two), strict=True):
        run.steps = [
            _step(st.index, st.tool, st.result, ReadState(st.before), ReadState(st.after))
            for st in plain.steps
        ]
    for volatile in ([], ["notes"], [], ["notes.n_2", "notes.n_9"], ["notes.n_2"]):
        assert _first_divergence(*read, volatile) == _first_divergence(one, two, volatile), volatile
    assert [s.changed for s in read[0].steps] == [True, True]
    same = ScenarioRun(scenario, initial=s0)  # the same JSON objects, keys in another order: the same result
    same.steps = [_step(1, "add", ToolResult(value={"b": 1, "a": 2}), s0, s0)]
    again = ScenarioRun(scenario, initial=s0)
    again.steps = [_step(1, "add", ToolResult(value={"a": 2, "b": 1}), s0, s0)]
    assert _first_divergence(same, again, []) is None
    again.steps = [_step(1, "add", ToolResult(value=[{"a": 2}, {"b": 1}]), s0, s0)]
    same.steps = [_step(1, "add", ToolResult(value=[{"b": 1}, {"a": 2}]), s0, s0)]
    assert "the result differs: 0.a" in (_first_divergence(same, again, []) or "")  # list order is meaning
    two.steps[0] = _step(1, "add", ToolResult(value="n_7"), s0, {"notes": {"n_1": "a"}})
    assert "step 1 (add): the result differs" in (_first_divergence(one, two, []) or "")


def test_final_state_problem_and_rejections() -> None:
    scenario = Scenario(name="s", steps=[], final_state={"a": 1, "b": 2})
    run = ScenarioRun(scenario, initial={"a": 1, "b": 3})
    assert run.final_problem([]) == "scenario s: final state differs: b: 3 (got) vs 2 (expected)"
    assert run.final_problem(["b"]) is None
    bad = RejectedState(name="r", state={}, error="overlaps")
    assert "was accepted" in (RejectionRecord(bad, None, [], False).problem or "")
    assert (
        RejectionRecord(
            bad, "invalid state: x", [{"loc": "events", "msg": "evt_1 overlaps evt_2"}], False
        ).problem
        is None
    )
    assert "not with 'overlaps'" in (RejectionRecord(bad, "invalid state: x", [], False).problem or "")
    assert "changed" in (RejectionRecord(bad, "invalid: overlaps", [], True).problem or "")
    pydantic_words = RejectedState(
        name="r", state={}, error="seats.economy\n  Input should be greater than or equal to 0"
    )
    error = {
        "loc": "seats.economy",
        "msg": "Input should be greater than or equal to 0",
        "type": "greater_than_equal",
    }
    assert (
        RejectionRecord(pydantic_words, "invalid state: seats.economy: ...", [error], False).problem is None
    )


def test_oversized_state_stays_valid_and_crosses_the_limit() -> None:
    state = EnvState().to_json()
    big = _oversized(state, 4096)
    assert big is not None and len(json.dumps(big, separators=(",", ":"))) > 4096
    EnvState.model_validate(big)  # otherwise valid: only its size is wrong
    assert _oversized({"no": "counters"}, 10) is None


# --- reports ----------------------------------------------------------------------------------------
def _reports() -> list[EnvReport]:
    ok = EnvReport("images/a", "a", "1.0.0", "sha256:" + "1" * 64, "sha256:" + "2" * 64)
    ok.results = [
        CheckResult.of("manifest.valid", passed("fine", ["a:1.0.0"]), 0.5),
        CheckResult.of("state.read_only", skipped("nothing to check"), 0.0),
    ]
    bad = EnvReport("b", "b", "2.0.0", "sha256:" + "3" * 64, "sha256:" + "4" * 64)
    bad.results = [
        CheckResult.of("state.determinism", failed("replays differ", [f"line {i}" for i in range(30)]), 1.0)
    ]
    gone = EnvReport("nope", error="no environment image for 'nope'")
    return [ok, bad, gone]


def test_json_report() -> None:
    data = to_json(_reports(), 3.0)
    assert data["format"] == "envreg.validate" and data["passed"] is False
    ok, bad, gone = data["environments"]
    assert ok["passed"] and ok["counts"] == {"pass": 1, "fail": 0, "skip": 1}
    assert not bad["passed"] and bad["checks"][0]["status"] == "fail"
    assert len(bad["checks"][0]["evidence"]) == 21 and bad["checks"][0]["evidence"][-1] == "... and 10 more"
    assert gone["error"].startswith("no environment image") and not gone["passed"]


def test_junit_report() -> None:
    root = ET.fromstring(to_junit(_reports(), 3.0))
    assert root.tag == "testsuites"
    assert (root.get("tests"), root.get("failures"), root.get("errors"), root.get("skipped")) == (
        "4",
        "1",
        "1",
        "1",
    )
    suites = root.findall("testsuite")
    assert [s.get("name") for s in suites] == [
        "envreg validate a:1.0.0",
        "envreg validate b:2.0.0",
        "envreg validate nope",
    ]
    failure = suites[1].find("testcase/failure")
    assert (
        failure is not None
        and failure.get("message") == "replays differ"
        and "line 0" in (failure.text or "")
    )
    assert suites[0].find("properties/property[@name='image_id']") is not None
    assert suites[2].find("testcase/error") is not None


# --- targets ------------------------------------------------------------------------------------------
def test_target_folder_name_or_image(tmp_path: Path) -> None:
    folder = Target.parse(str(FIXTURES / "broken" / "slow"))
    assert folder.ref == "broken-slow:1.0.0" and folder.folder == (FIXTURES / "broken" / "slow").resolve()
    assert Target.parse("calendar:1.0.0") == Target("calendar:1.0.0", "calendar:1.0.0")
    from envreg.errors import EnvregError

    with pytest.raises(EnvregError, match=r"without an env\.py"):
        Target.parse(str(tmp_path))


# --- the TypeScript SDKs' validators ----------------------------------------------------------------
@pytest.mark.anyio
async def test_typescript_validators_refuse_what_strict_clients_refuse() -> None:
    tools = [
        {
            "name": "remind",
            "inputSchema": {
                "type": "object",
                "properties": {"code": {"type": "string", "pattern": "^[\\w-a]+$"}},
            },
            "outputSchema": {
                "type": "object",
                "properties": {"due": {"type": "string", "format": "date-time"}},
            },
        },
        {"name": "ok", "inputSchema": {"type": "object", "properties": {"n": {"type": "integer"}}}},
    ]
    job = {
        "tools": tools,
        "arguments": [{"tool": "ok", "where": "s1", "value": {"n": "3"}}],
        "results": [{"tool": "remind", "where": "s2", "value": {"due": "2026-01-05T09:30:00"}}],
    }
    async with SchemaWorker(NPM_CACHE) as worker:
        answer = await worker.check(job)
        again = await worker.check({"tools": tools[1:]})  # the worker serves several jobs
    assert set(answer["clients"]) == {"v1", "v2"}
    assert "@modelcontextprotocol/sdk 1.32.2" in answer["clients"]["v1"]
    assert "@modelcontextprotocol/client 2.4.0" in answer["clients"]["v2"]
    kinds = {(p["client"], p["tool"], p["kind"]) for p in answer["problems"]}
    for client in ("v1", "v2"):
        assert (
            client,
            "remind",
            "inputSchema refused",
        ) in kinds  # a Python-only regex: JS refuses it (u flag)
        assert (client, "remind", "result refused") in kinds  # a naive date-time
        assert (client, "ok", "arguments refused") in kinds
    date_time = next(p for p in answer["problems"] if p["kind"] == "result refused")
    assert 'must match format "date-time"' in date_time["error"] and date_time["where"] == "s2"
    assert again["problems"] == [] and again["compiled"] == 2


def test_npm_missing_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from envreg import npm
    from envreg.validate.ts import PACKAGES

    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(NpmError) as info:
        npm.install(PACKAGES, tmp_path / "cache")
    assert "npm is not installed" in str(info.value) and "apt-get install -y npm" in str(info.value)


# --- the CLI's usage errors ---------------------------------------------------------------------------
def test_cli_usage_errors_and_list() -> None:
    runner = CliRunner()
    r = runner.invoke(app, ["validate"])
    assert r.exit_code == 2 and "no environments to validate" in r.output and "--all" in r.output
    r = runner.invoke(app, ["validate", "calendar", "--check", "nope"])
    assert r.exit_code == 2 and "'nope' matches no check" in r.output
    r = runner.invoke(app, ["validate", "--list"])
    assert r.exit_code == 0 and all(name in r.output for name in CHECKS)
    env = {"ENVREG_IMAGES": os.devnull}
    r = runner.invoke(app, ["validate", "--all"], env=env)
    assert r.exit_code == 2 and "no environment folders" in r.output


def test_status_values_are_the_reported_words() -> None:
    assert [str(s) for s in Status] == ["pass", "fail", "skip"]


def test_determinism_needs_equal_state_hashes_also_in_volatile_paths() -> None:
    """A wall clock kept in a volatile path passes a volatile-blind comparison, but gives replays other
    state hashes and snapshot ids: state.determinism names it."""
    from envreg.validate.state import _first_divergence, _hash_divergence

    scenario = Scenario(name="clock", initial_state={}, steps=[])

    def run(stamp: str) -> ScenarioRun:
        after = {"files": ["a"], "private": {"modified": stamp}}
        step = StepRecord(0, "touch", {}, ToolResult(value=None), 1.0, {}, after)
        return ScenarioRun(scenario, initial={}, steps=[step])

    first, second = run("2026-12-02T18:33:34.070071"), run("2026-12-02T18:33:35.120004")
    assert _first_divergence(first, second, ["private"]) is None
    why = _hash_divergence(first, second)
    assert why is not None and "state hash differs in volatile paths" in why and "private.modified" in why
    assert _hash_divergence(first, run("2026-12-02T18:33:34.070071")) is None
