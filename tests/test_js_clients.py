"""Real MCP clients that are not Python, against sandboxes behind the gateway, on both tiers and in both
protocol eras: the TypeScript SDKs (v1 and v2) calling every tool of every environment, the MCP Inspector
CLI and the official conformance suite against every environment, and what each client shows when a
sandbox refuses it.

The npm packages (and Node 22) are pinned in tests/js/ and installed by `js_clients.install()`. The
whole matrix shares one runtime and one sandbox per environment and tier (`fleet`, module-scoped); each
test loads the states it needs into them. The Inspector and the suite take each environment on one
(tier, era) in turn (`rotation`): every environment is met once by each, every (tier, era) by six.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from anyio.streams.text import TextReceiveStream
from conftest import REFERENCE_ENVS
from js_clients import env, install
from test_sessions import ACCEPT, INITIALIZE, session_headers
from test_sessions_docker import LIST, open_sessions
from token_proxy import TokenProxy

from envreg.env import Environment, load_environment, load_scenarios, states_equal
from envreg.env.scenario import CallOutcome, Scenario, run_steps
from envreg.runtime import Runtime
from envreg.runtime.sandbox import Sandbox

pytestmark = [pytest.mark.docker, pytest.mark.anyio, pytest.mark.xdist_group("js-clients")]

TIERS = ("instance", "container")
ERAS = ("2025-11-25", "2026-07-28")
COMBOS = [(tier, era) for tier in TIERS for era in ERAS]
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
INSPECTOR_ERA = {"2025-11-25": "legacy", "2026-07-28": "modern"}
_RESULT_DIR = re.compile(r"^server-(.+)-\d{4}-\d{2}-\d{2}T[\d-]+Z$")


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def js() -> Path:
    return install()


@dataclass
class Fleet:
    """One runtime, and one sandbox per (environment, tier) that every test of the module reuses."""

    rt: Runtime
    hosts: dict[tuple[str, str], Sandbox]

    async def prepare(self, name: str, tier: str, scenario: Scenario) -> Sandbox:
        """The sandbox of `name` on `tier`, holding the scenario's initial state."""
        host = self.hosts[name, tier]
        if scenario.initial_state is None:
            await host.reset()
        else:
            await host.load_state(scenario.initial_state)
        return host


@pytest.fixture(scope="module")
async def fleet(reference_images, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Fleet]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ENVREG_HOME", str(tmp_path_factory.mktemp("js-clients-home")))
        # any loopback port: the conformance suite reaches the gateway through token proxies of its own
        async with Runtime(allowed_hosts=["127.0.0.1:*"], lease_ttl=6 * 3600) as rt:
            hosts: dict[tuple[str, str], Sandbox] = {}
            warming = anyio.CapacityLimiter(WORKERS)

            async def start(name: str, tier: str) -> None:
                host = hosts[name, tier] = await rt.sandbox(name, isolation=tier)
                async with warming:
                    await warm(host)

            async with anyio.create_task_group() as tg:
                for name in REFERENCE_ENVS:
                    for tier in TIERS:
                        tg.start_soon(start, name, tier)
            yield Fleet(rt, hosts)


async def warm(host: Sandbox) -> None:
    """Start the `mcp` SDK in the sandbox's container (its first session-era request does), once the
    container is up: a few at a time, since each import takes a core for a second or more."""
    auth = {"authorization": f"Bearer {host.token}"}
    async with httpx2.AsyncClient(timeout=120) as http:
        with anyio.fail_after(300):
            while (
                r := await http.post(host.mcp_url, json=INITIALIZE, headers={**ACCEPT, **auth})
            ).status_code == 504:
                pass  # the gateway's 30 s: the import goes on, the next initialize finds it done
        assert r.status_code == 200, r.text
        await http.delete(host.mcp_url, headers={**session_headers(r.headers["mcp-session-id"]), **auth})


def scenarios_of(name: str) -> tuple[Environment, list[Scenario]]:
    environment = load_environment(name)
    return environment, load_scenarios(environment.folder)[0]


WORKERS = 2
"""Client processes at once: this machine's cores (a Node client is single-threaded)."""


async def each(items: list, work: Callable[[Any], Awaitable[None]]) -> None:
    """`work(item)` for every item, `WORKERS` at a time."""
    limiter = anyio.CapacityLimiter(WORKERS)

    async def one(item: Any) -> None:
        async with limiter:
            await work(item)

    async with anyio.create_task_group() as tg:
        for item in items:
            tg.start_soon(one, item)


def rotation(tier: str, era: str) -> list[str]:
    """The environments one (tier, era) takes for the Inspector and the conformance suite."""
    return REFERENCE_ENVS[COMBOS.index((tier, era)) :: len(COMBOS)]


async def node(js: Path, *args: str, timeout: float = 300) -> tuple[int, str, str]:
    with anyio.fail_after(timeout):
        proc = await anyio.run_process([*args], cwd=js, env=env(js), check=False)
    return proc.returncode, proc.stdout.decode(), proc.stderr.decode()


async def drive(
    js: Path,
    job: dict,
    prepare: Callable[[int], Awaitable[None]],
    finish: Callable[[int], Awaitable[None]],
    tmp_path: Path,
) -> list[dict]:
    """Run tests/js/drive.mjs on `job` in sync mode: `prepare(i)` before run i, `finish(i)` after it."""
    (tmp_path / "job.json").write_text(json.dumps({**job, "sync": True}))
    out, noise = bytearray(), []
    with anyio.fail_after(900):
        async with await anyio.open_process(
            ["node", "drive.mjs", str(tmp_path / "job.json")], cwd=js, env=env(js)
        ) as proc:

            async def read_out() -> None:
                async for chunk in proc.stdout:
                    out.extend(chunk)

            async with anyio.create_task_group() as tg:
                tg.start_soon(read_out)
                previous, pending = None, ""
                async for text in TextReceiveStream(proc.stderr):
                    *lines, pending = (pending + text).split("\n")
                    for line in lines:
                        if not line.startswith("envreg-run "):
                            noise.append(line)
                            continue
                        if previous is not None:
                            await finish(previous)
                        previous = int(line.split()[1])
                        await prepare(previous)
                        await proc.stdin.send(b"go\n")
            code = await proc.wait()
    assert code == 0, "\n".join(noise[-40:])
    if previous is not None:
        await finish(previous)
    return json.loads(out)["runs"]


@pytest.mark.parametrize(("sdk", "era"), TS_CLIENTS, ids=[f"{s}-{e}" for s, e in TS_CLIENTS])
@pytest.mark.parametrize("tier", TIERS)
async def test_typescript_sdks_call_every_tool(
    js: Path, fleet: Fleet, tier: str, sdk: str, era: str, tmp_path: Path
) -> None:
    """Every scenario of every environment on the instance tier (each environment's longest on the
    container tier), step by step, from a TypeScript SDK client: every tool is called, every result is
    accepted by the client and matches the scenario, every final state too."""
    plan: list[tuple[str, Environment, Scenario]] = []
    for name in REFERENCE_ENVS:
        environment, scenarios = scenarios_of(name)
        tools = {t["name"] for t in environment.list_tools()}
        never_called = tools - {step.tool for s in scenarios for step in s.steps}
        assert not never_called, f"{name}: no scenario calls {sorted(never_called)}; add one that does"
        if tier == "container":
            scenarios = [max(scenarios, key=lambda s: len(s.steps))]
        plan += [(name, environment, s) for s in scenarios]
    runs: dict[int, dict] = {}
    finals: dict[int, dict] = {}

    async def share(worker: int) -> None:
        """The runs of every WORKERS-th environment, in one client process (a sandbox has one driver)."""
        mine = [i for i, (name, _, _) in enumerate(plan) if REFERENCE_ENVS.index(name) % WORKERS == worker]
        hosts = [fleet.hosts[plan[i][0], tier] for i in mine]
        job = {
            "sdk": sdk,
            "era": era,
            "runs": [
                {
                    "url": host.mcp_url,
                    "token": host.token,
                    "steps": [st.model_dump() for st in plan[i][2].steps],
                }
                for i, host in zip(mine, hosts, strict=True)
            ],
        }

        async def prepare(k: int) -> None:
            await fleet.prepare(plan[mine[k]][0], tier, plan[mine[k]][2])

        async def finish(k: int) -> None:
            finals[mine[k]] = await hosts[k].state()

        folder = tmp_path / f"worker-{worker}"
        folder.mkdir()
        for k, run in enumerate(await drive(js, job, prepare, finish, folder)):
            runs[mine[k]] = run

    await each(list(range(WORKERS)), share)
    assert sorted(runs) == list(range(len(plan)))
    failures: list[str] = []
    for i, (name, environment, scenario) in enumerate(plan):
        run, where = runs[i], f"{name}/{scenario.name}"
        if run["protocolVersion"] != era:
            failures.append(f"{where}: the client spoke {run['protocolVersion']}, not {era}")
        if run["tools"] != [t["name"] for t in environment.list_tools()]:
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
        if final is not None and not states_equal(finals[i], final, environment.volatile):
            failures.append(f"{where}: the final state differs from the scenario's")
    assert not failures, summary(failures)


@pytest.mark.parametrize(("tier", "era"), COMBOS)
async def test_inspector_cli_lists_tools_and_calls_one(js: Path, fleet: Fleet, tier: str, era: str) -> None:
    """The Inspector CLI calls the first tool of each environment's first scenario (and, on the first
    environment, lists every tool exactly as the manifest has them); without the token it is refused."""
    failures: list[str] = []
    names = rotation(tier, era)

    async def check(name: str) -> None:
        environment, scenarios = scenarios_of(name)
        scenario = scenarios[0]
        step = scenario.steps[0]
        host = await fleet.prepare(name, tier, scenario)
        local = await fleet.rt.sandbox(name, isolation="local", state=scenario.initial_state)
        expected = await local.call_tool(step.tool, step.arguments)
        await local.close()
        cli = [
            "inspector",
            "--cli",
            host.mcp_url,
            "--transport",
            "http",
            "--protocol-era",
            INSPECTOR_ERA[era],
        ]
        auth = ["--header", f"Authorization: Bearer {host.token}"]
        if name == names[0]:
            code, stdout, stderr = await node(js, *cli, *auth, "--method", "tools/list")
            if code != 0 or json.loads(stdout)["tools"] != environment.list_tools():
                failures.append(
                    f"{name}: tools/list differs from the manifest: {stdout[:300]}{stderr[-300:]}"
                )
            code, stdout, stderr = await node(js, *cli, "--method", "tools/list")
            if code == 0 or "auth" not in (stdout + stderr).lower():
                failures.append(f"{name}: without the token: {code} {stdout[-300:]} {stderr[-300:]}")
        arguments = json.dumps(step.arguments)
        call = ["--method", "tools/call", "--tool-name", step.tool, "--tool-args-json", arguments]
        code, stdout, stderr = await node(js, *cli, *auth, *call)
        if code != 0:
            failures.append(f"{name}: {step.tool}: exit {code}: {stderr[-500:]}")
            return
        result = json.loads(stdout)
        if bool(result.get("isError")) != expected.is_error or result["content"][0]["text"] != expected.text:
            failures.append(f"{name}: {step.tool} gave {stdout[:300]}, the local tier {expected.text[:300]}")

    await each(names, check)
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize(("tier", "era"), COMBOS)
async def test_conformance_suite(js: Path, fleet: Fleet, tier: str, era: str, tmp_path: Path) -> None:
    """The official suite (all of it, scored on the scenarios that apply) against gateway URLs, through a
    proxy that adds the sandbox's token (the suite cannot send headers). The proxy passes Host and Origin
    through, so the gateway is told its name."""
    failures: list[str] = []
    gateway = ("127.0.0.1", int(fleet.rt.gateway_url.rsplit(":", 1)[1]))

    async def check(name: str) -> None:
        host = fleet.hosts[name, tier]
        await host.reset()
        out = tmp_path / name
        proxy = TokenProxy(gateway, host.token)
        async with proxy.serving():
            url = f"http://127.0.0.1:{proxy.port}/sandboxes/{host.id}/mcp"
            suite = ["conformance", "server", "--url", url, "--suite", "all", "--spec-version", era]
            code, stdout, stderr = await node(js, *suite, "-o", str(out))
        found = {}
        for checks in out.glob("*/checks.json"):
            match = _RESULT_DIR.match(checks.parent.name)
            if match and match.group(1) in CONFORMANCE[era]:
                found[match.group(1)] = json.loads(checks.read_text())
        for scenario in CONFORMANCE[era]:
            if not found.get(scenario):
                failures.append(
                    f"{name}: {scenario}: no results (exit {code})\n{stdout[-1500:]}\n{stderr[-1500:]}"
                )
                continue
            for result in found[scenario]:
                if result["status"] in ("FAILURE", "ERROR") and result["id"] not in NOT_APPLICABLE:
                    failures.append(f"{name}: {scenario}: {result['id']}: {result.get('errorMessage')}")

    await each(rotation(tier, era), check)
    assert not failures, "\n".join(failures)


async def connect(js: Path, tmp_path: Path, **job) -> str:
    """What tests/js/connect.mjs says: the tools it listed, or the client's error."""
    path = tmp_path / f"connect-{len(list(tmp_path.glob('connect-*')))}.json"
    path.write_text(json.dumps(job))
    code, stdout, stderr = await node(js, "node", "connect.mjs", str(path), timeout=120)
    assert code == 0, stderr
    return stdout


async def test_clients_show_why_a_sandbox_refused_them(js: Path, fleet: Fleet, tmp_path: Path) -> None:
    """A wrong token, a sandbox that ended during the conversation or before it, a session that was
    evicted: each client shows the gateway's or the server's JSON-RPC message."""
    clients = [("v1", "2025-11-25"), ("v2", "2025-11-25"), ("v2", "auto"), ("v2", "2026-07-28")]
    sb = await fleet.rt.sandbox("calendar", isolation="instance")
    for sdk, era in clients:
        said = await connect(js, tmp_path, sdk=sdk, era=era, url=sb.mcp_url, token="wrong")
        assert "missing or wrong sandbox token" in said, (sdk, era, said)
    # an agent in the middle of its conversation when its sandbox ends
    for sdk, era in clients:
        ending = await fleet.rt.sandbox("calendar", isolation="instance")
        go = tmp_path / f"go-{ending.id}"
        job = tmp_path / f"then-{ending.id}.json"
        job.write_text(
            json.dumps(
                {"sdk": sdk, "era": era, "url": ending.mcp_url, "token": ending.token, "then": str(go)}
            )
        )
        with anyio.fail_after(120):
            async with await anyio.open_process(
                ["node", "connect.mjs", str(job)], cwd=js, env=env(js)
            ) as proc:
                said = b""
                while b"connected" not in said:
                    said += await proc.stderr.receive()
                await ending.close("its lease expired")
                go.write_text("")
                said = b"".join([chunk async for chunk in proc.stdout]).decode()
        assert f"sandbox {ending.id} has ended: its lease expired" in said, (sdk, era, said)
    # connecting to one that has ended (the v2 client pinned to 2026-07-28 answers a failed probe with
    # "Version negotiation failed" whatever the body says: see README.md, "MCP clients and conformance")
    await sb.close("deleted")
    for sdk, era in clients[:3]:
        said = await connect(js, tmp_path, sdk=sdk, era=era, url=sb.mcp_url, token=sb.token)
        assert f"sandbox {sb.id} has ended: deleted" in said, (sdk, era, said)
    cli = [
        "inspector",
        "--cli",
        sb.mcp_url,
        "--transport",
        "http",
        "--header",
        f"Authorization: Bearer {sb.token}",
    ]
    code, stdout, stderr = await node(js, *cli, "--method", "tools/list")
    assert code != 0 and f"sandbox {sb.id} has ended: deleted" in stdout + stderr, (stdout, stderr)
    # a client that comes back with the id of a session evicted meanwhile
    flooder = await fleet.rt.sandbox("calendar", isolation="instance")
    cap = (await flooder.server.client.healthz())["sessions"]["max_per_instance"]
    opened: list[str] = []
    async with httpx2.AsyncClient(timeout=60) as http:
        await open_sessions(http, flooder, cap + 1, opened)
        auth = {"authorization": f"Bearer {flooder.token}", **session_headers(opened[0])}
        assert (await http.post(flooder.mcp_url, json=LIST, headers=auth)).status_code == 404
    said = await connect(js, tmp_path, sdk="v1", era="2025-11-25", url=flooder.mcp_url, token=flooder.token,
                         sessionId=opened[0])  # fmt: skip
    assert f"session {opened[0]} was evicted" in said and "initialize a new session" in said, said
    await flooder.close()


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
