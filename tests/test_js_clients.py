"""Real MCP clients that are not Python, against sandboxes behind the gateway: the official conformance
suite, the MCP Inspector CLI, and the TypeScript SDK calling every tool of every environment.

The npm packages (and Node 22) are pinned in tests/js/ and installed by `js_clients.install()`.
"""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest
from conftest import REFERENCE_ENVS
from js_clients import env, install
from token_proxy import TokenProxy

from envreg.env import load_environment, load_scenarios, states_equal
from envreg.env.scenario import CallOutcome, run_steps
from envreg.runtime import Runtime

pytestmark = [pytest.mark.docker, pytest.mark.anyio]

# The conformance suite's scenarios that apply to an envreg environment, per protocol era; README.md
# ("MCP conformance") says why the others do not.
CONFORMANCE = {
    "2025-11-25": [
        "server-initialize",
        "server-session-lifecycle",
        "ping",
        "tools-list",
        "server-sse-multiple-streams",
        "dns-rebinding-protection",
    ],
    "2026-07-28": [
        "server-stateless",
        "tools-list",
        "caching",
        "server-sse-multiple-streams",
        "http-header-validation",
        "input-required-result-unsupported-methods",
        "input-required-result-validate-input",
        "dns-rebinding-protection",
    ],
}
# Checks inside those scenarios that exercise what an environment does not have.
NOT_APPLICABLE = {
    "sep-2575-server-rejects-undeclared-capability": "needs the suite's diagnostic tool test_missing_capability",
    "sep-2575-missing-capability-http-400": "needs the suite's diagnostic tool test_missing_capability",
    "sep-2575-http-server-no-independent-requests-on-stream": "needs its tool test_streaming_elicitation",
    "sep-2575-server-no-log-without-loglevel": "needs its tool test_logging_tool",
    "sep-2549-prompts-list-caching-hints": "environments serve tools only, no prompts",
    "sep-2549-resources-list-caching-hints": "environments serve tools only, no resources",
    "sep-2549-resources-templates-list-caching-hints": "environments serve tools only, no resources",
}
TS_CLIENTS = [("v1", "2025-11-25"), ("v2", "2025-11-25"), ("v2", "2026-07-28")]


@pytest.fixture(scope="session")
def js() -> Path:
    return install()


@pytest.fixture(autouse=True)
def _images(reference_images) -> None:
    pass


async def node(js: Path, *args: str, timeout: float = 300) -> tuple[int, str, str]:
    with anyio.fail_after(timeout):
        proc = await anyio.run_process([*args], cwd=js, env=env(js), check=False)
    return proc.returncode, proc.stdout.decode(), proc.stderr.decode()


@pytest.mark.parametrize("era", CONFORMANCE)
async def test_conformance_suite(js: Path, era: str, tmp_path: Path) -> None:
    """The official suite against a gateway URL, through a proxy that adds the sandbox's token (the suite
    cannot send headers). The proxy passes Host and Origin through, so the gateway is told its name."""
    failures: list[str] = []
    proxy = TokenProxy(("127.0.0.1", 0), "")
    async with proxy.serving():
        async with Runtime(allowed_hosts=[f"127.0.0.1:{proxy.port}"]) as rt:
            sb = await rt.sandbox("calendar", isolation="instance")
            proxy.upstream = ("127.0.0.1", int(rt.gateway_url.rsplit(":", 1)[1]))
            proxy.header = f"authorization: Bearer {sb.token}\r\n".encode()
            url = f"http://127.0.0.1:{proxy.port}/sandboxes/{sb.id}/mcp"
            for scenario in CONFORMANCE[era]:
                out = tmp_path / scenario
                code, stdout, stderr = await node(
                    js, "conformance", "server", "--url", url, "--scenario", scenario,
                    "--spec-version", era, "-o", str(out),
                )  # fmt: skip
                results = list(out.glob("*/checks.json"))
                if not results:
                    failures.append(
                        f"{scenario}: no results (exit {code})\n{stdout[-2000:]}\n{stderr[-2000:]}"
                    )
                    continue
                checks = json.loads(results[0].read_text())
                assert checks, scenario
                for check in checks:
                    if check["status"] in ("FAILURE", "ERROR") and check["id"] not in NOT_APPLICABLE:
                        failures.append(f"{scenario}: {check['id']}: {check.get('errorMessage')}")
    assert not failures, "\n".join(failures)


async def test_inspector_cli_lists_tools_and_calls_one(js: Path) -> None:
    calendar = load_environment("calendar")
    async with Runtime() as rt:
        sb = await rt.sandbox("calendar", isolation="instance")
        local = await rt.sandbox("calendar", isolation="local")
        cli = ["inspector", "--cli", sb.mcp_url, "--transport", "http"]
        auth = ["--header", f"Authorization: Bearer {sb.token}"]
        code, stdout, stderr = await node(js, *cli, *auth, "--method", "tools/list")
        assert code == 0, stderr
        listed = json.loads(stdout)["tools"]
        assert [t["name"] for t in listed] == [t["name"] for t in calendar.list_tools()]
        assert listed == calendar.list_tools()
        code, stdout, stderr = await node(
            js, *cli, *auth, "--method", "tools/call", "--tool-name", "list_calendars"
        )
        assert code == 0, stderr
        result = json.loads(stdout)
        expected = await local.call_tool("list_calendars", {})
        assert not result.get("isError") and result["content"][0]["text"] == expected.text
        assert result["structuredContent"] == {"result": expected.value}
        # without the token: refused, and the Inspector says it needs authorization
        code, stdout, stderr = await node(js, *cli, "--method", "tools/list")
        assert code != 0 and "auth" in (stdout + stderr).lower(), (stdout, stderr)


@pytest.mark.parametrize(("sdk", "era"), TS_CLIENTS, ids=[f"{s}-{e}" for s, e in TS_CLIENTS])
@pytest.mark.parametrize("name", REFERENCE_ENVS)
async def test_typescript_sdk_calls_every_tool(
    js: Path, name: str, sdk: str, era: str, tmp_path: Path
) -> None:
    """Every scenario of the environment, step by step, from a TypeScript SDK client; every tool is
    called, every result is accepted by the client and matches the scenario, every final state too."""
    environment = load_environment(name)
    scenarios = load_scenarios(environment.folder)[0]
    tools = [t["name"] for t in environment.list_tools()]
    never_called = set(tools) - {step.tool for s in scenarios for step in s.steps}
    assert not never_called, f"{name}: no scenario calls {sorted(never_called)}; add one that does"
    failures: list[str] = []
    async with Runtime() as rt:
        sandboxes = [await rt.sandbox(name, isolation="instance", state=s.initial_state) for s in scenarios]
        job = {
            "sdk": sdk,
            "era": era,
            "runs": [
                {"url": sb.mcp_url, "token": sb.token, "steps": [st.model_dump() for st in s.steps]}
                for sb, s in zip(sandboxes, scenarios, strict=True)
            ],
        }
        (tmp_path / "job.json").write_text(json.dumps(job))
        code, stdout, stderr = await node(js, "node", "drive.mjs", str(tmp_path / "job.json"))
        assert code == 0, stderr
        runs = json.loads(stdout)["runs"]
        for scenario, sb, run in zip(scenarios, sandboxes, runs, strict=True):
            where = f"{name}/{scenario.name}"
            if run["protocolVersion"] != era:
                failures.append(f"{where}: the client spoke {run['protocolVersion']}, not {era}")
            if run["tools"] != tools:
                failures.append(f"{where}: tools/list gave {run['tools']}")
            outcomes = iter(zip(scenario.steps, run["outcomes"], strict=True))

            async def replay(tool: str, arguments: dict, outcomes=outcomes) -> CallOutcome:
                step, outcome = next(outcomes)
                assert (step.tool, step.arguments) == (tool, arguments)
                if "clientError" in outcome:  # run_steps reports it, as an error where none was expected
                    return CallOutcome(True, f"the TypeScript client refused it: {outcome['clientError']}")
                return CallOutcome(outcome["isError"], outcome["text"])

            failures += [f"{where}: {f}" for f in await run_steps(scenario, replay)]
            final = scenario.final_state
            if final is not None and not states_equal(await sb.state(), final, environment.volatile):
                failures.append(f"{where}: the final state differs from the scenario's")
    assert not failures, summary(failures)


def summary(failures: list[str]) -> str:
    """The failures grouped by what went wrong (many calls of one tool often fail the same way)."""
    groups: dict[str, list[str]] = {}
    for failure in failures:
        where, _, what = failure.partition(": ")
        if what.startswith("step "):
            step, _, what = what.partition(": ")
            where = f"{where} {step}"
        groups.setdefault(what, []).append(where)
    lines = [f"{len(failures)} problems:"]
    for what, places in sorted(groups.items(), key=lambda g: -len(g[1])):
        lines.append(
            f"- {len(places)} x {what}\n    at {', '.join(places[:4])}{' ...' if len(places) > 4 else ''}"
        )
    return "\n".join(lines)
