"""Sandbox checks: what the image's process is and can do inside a hardened container of the Docker backend:
not root, a read-only root, no way out (and no tool that tries), control plane closed without its token,
size limits enforced."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator
from typing import Any

import anyio

from envreg.canonical import canonical_json
from envreg.errors import InvalidState, TooLarge
from envreg.http.client import async_client
from envreg.protocol import AGENT_PORT, MCP_VERSION
from envreg.runtime import Sandbox
from envreg.validate import probe
from envreg.validate.context import Context
from envreg.validate.core import Outcome, check, skipped, verdict
from envreg.validate.runs import call, start_state

ROOT_USERS = {"", "0", "root"}


# --- facts gathered once per image -------------------------------------------------------------
@contextlib.contextmanager
def _listener(host: str) -> Iterator[int | None]:
    """A listening socket on `host` (the sandbox network's address on this host): a service a sandbox must not reach."""
    try:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind((host, 0))
        sock.listen(8)
    except OSError:
        yield None
        return
    try:
        yield sock.getsockname()[1]
    finally:
        sock.close()


async def sandbox_facts(ctx: Context) -> dict[str, Any]:
    """The in-container probe of container 2 (uid, mounts, writes, reachability) and its Docker settings."""

    async def make() -> dict[str, Any]:
        first, second = await ctx.main(), await ctx.second()
        container = ctx.container(second)
        await anyio.to_thread.run_sync(container.reload)
        targets: dict[str, tuple[str, int]] = {"an outside address (1.1.1.1:443)": ("1.1.1.1", 443)}
        if first.upstream is not None:
            targets["container 1's agent plane"] = (first.upstream.host, AGENT_PORT)
        network = getattr(ctx.rt.backend, "network", None)
        ipam = ((getattr(network, "attrs", None) or {}).get("IPAM") or {}).get("Config") or [{}]
        host = ipam[0].get("Gateway")
        if not host:
            return {"docker": container.attrs, **await probe.sandbox_facts(container, targets)}
        if ctx.rt.gateway_url:
            targets[f"this host's gateway port on the sandbox network ({host})"] = (
                host,
                int(ctx.rt.gateway_url.rsplit(":", 1)[1]),
            )
        with _listener(host) as port:
            if port is not None:
                targets[f"a service listening on this host at {host}:{port}"] = (host, port)
            facts = await probe.sandbox_facts(container, targets)
        return {"docker": container.attrs, **facts}

    return await ctx.shared("sandbox-facts", make)


# --- checks -----------------------------------------------------------------------------------------
@check("sandbox.non_root", "The image runs as a non-root user, with no capabilities.")
async def non_root(ctx: Context) -> Outcome:
    facts = await sandbox_facts(ctx)
    problems = []
    user = ctx.image.user
    if user.split(":")[0] in ROOT_USERS:
        problems.append(
            f"the image's USER is {user or '(unset: root)'}: set a non-root USER (envreg images use 65534)"
        )
    uid, gid = facts.get("uid", []), facts.get("gid", [])
    if not uid or 0 in uid:
        problems.append(f"the server process runs with uid {uid}")
    if not gid or 0 in gid:
        problems.append(f"the server process runs with gid {gid}")
    if int(facts.get("cap_eff", "1"), 16) != 0:
        problems.append(f"the server process holds capabilities (CapEff {facts.get('cap_eff')})")
    evidence = [
        f"image USER {user or '(unset)'}",
        f"pid 1 uid {uid}, gid {gid}, CapEff {facts.get('cap_eff')}",
    ]
    return verdict(problems, "not root, no capabilities", "runs as root", evidence)


@check("sandbox.read_only_root", "The root filesystem is read-only: the image needs no writes outside /tmp.")
async def read_only_root(ctx: Context) -> Outcome:
    facts = await sandbox_facts(ctx)
    problems = []
    if not (facts["docker"].get("HostConfig") or {}).get("ReadonlyRootfs"):
        problems.append("the container was not started with a read-only root (ReadonlyRootfs)")
    mount = facts.get("root_mount", "")
    if mount.split(",")[:1] != ["ro"]:
        problems.append(f"/ is mounted {mount or '(not found)'}, not ro")
    problems += [f"{path} could be written" for path, how in facts["writes"].items() if how == "written"]
    evidence = [f"/ mounted {mount}", *(f"write {p}: {how}" for p, how in facts["writes"].items())]
    return verdict(
        problems, "root filesystem is read-only and the server runs on it", "root is writable", evidence
    )


async def _network_users(ctx: Context) -> list[str]:
    """Replay the scenarios on container 1 reading its counters around every call: the calls that reached out."""
    sandbox = await ctx.main()
    container = ctx.container(sandbox)
    found = []
    async with ctx.main_lock:
        for scenario in ctx.scenarios:
            if await start_state(sandbox, scenario) is not None:
                continue
            for i, step in enumerate(scenario.steps, 1):
                before = await probe.counters(container)
                await call(sandbox, step.tool, step.arguments)
                moved = probe.moved(before, await probe.counters(container))
                if moved:
                    shown = ", ".join(f"{k} +{v}" for k, v in moved.items())
                    found.append(
                        f"tool {step.tool!r} (scenario {scenario.name}, step {i}) opened network traffic: {shown}"
                    )
    return found


@check(
    "sandbox.no_network", "Nothing outside is reachable from inside, and no tool tries (network counters)."
)
async def no_network(ctx: Context) -> Outcome:
    facts = await sandbox_facts(ctx)
    runs = await ctx.runs()
    problems = [
        f"from inside, {name} is reachable ({how})"
        for name, how in facts["reach"].items()
        if how in ("open", "resolved")
    ]
    evidence = [f"{name}: {how}" for name, how in sorted(facts["reach"].items())]
    if runs.counters_error:
        problems.append(f"could not read the container's network counters: {runs.counters_error}")
    elif runs.counters_moved:
        users = await _network_users(ctx)
        moved = ", ".join(f"{k} +{v}" for k, v in runs.counters_moved.items())
        problems += users or [f"the scenarios opened network traffic ({moved}), but no single call did again"]
    else:
        calls = sum(len(r.steps) for r in runs.scenarios)
        evidence.append(
            f"{calls} scenario calls opened no connection and sent no datagram (Tcp.ActiveOpens, Udp.OutDatagrams, Ip.OutNoRoutes unchanged)"
        )
    return verdict(problems, "no way out, and no tool tried", "network reached or attempted", evidence)


CONTROL_ROUTES = [
    ("GET", "/healthz", None),
    ("GET", "/manifest", None),
    ("GET", "/instances", None),
    ("POST", "/instances", {}),
    ("GET", "/instances/default/state", None),
    ("PUT", "/instances/default/state", {"now": "2030-01-01T00:00:00"}),
    ("POST", "/instances/default/reset", None),
    ("DELETE", "/instances/default", None),
]
TOOLS_LIST = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}


@check(
    "sandbox.control_token",
    "The control plane refuses every request without its token (and the agent plane without its secret).",
)
async def control_token(ctx: Context) -> Outcome:
    sandbox = await ctx.second()
    client: Any = sandbox.server.client
    control_url, agent_url = getattr(client, "control_url", None), getattr(client, "agent_url", None)
    if not control_url or sandbox.upstream is None:
        return skipped("this backend gives no address of the control plane")
    wrong = {"": {}, "a wrong token": {"authorization": "Bearer not-the-token"}}
    if sandbox.token:
        wrong["the sandbox's MCP token"] = {"authorization": f"Bearer {sandbox.token}"}
    problems, tried = [], 0
    async with ctx.second_lock:
        before = await sandbox.state_sha256()
        async with async_client(timeout=10) as http:
            for label, headers in wrong.items():
                for method, path, body in CONTROL_ROUTES:
                    response = await http.request(method, control_url + path, json=body, headers=headers)
                    tried += 1
                    if response.status_code != 401:
                        problems.append(
                            f"control plane {method} {path} with {label or 'no token'}: HTTP {response.status_code}, not 401"
                        )
                mcp = {"content-type": "application/json", "accept": "application/json, text/event-stream",
                       "mcp-protocol-version": MCP_VERSION, "mcp-method": "tools/list", **headers}  # fmt: skip
                response = await http.post(agent_url + sandbox.upstream.path, json=TOOLS_LIST, headers=mcp)
                tried += 1
                if response.status_code != 401:
                    problems.append(
                        f"agent plane reached directly (not through the gateway) with {label or 'no token'}: "
                        f"HTTP {response.status_code}, not 401"
                    )
        await client.healthz()  # the real token still works
        after = await sandbox.state_sha256()
    if before != after:
        problems.append("the refused requests changed the state")
    evidence = [f"{tried} requests without the right secret refused with 401; the real token is accepted"]
    return verdict(
        problems,
        "both planes refuse requests without their secrets",
        "a plane answers without its secret",
        evidence,
    )


def _oversized(state: dict[str, Any], limit: int) -> dict[str, Any] | None:
    """`state` grown just over `limit` bytes through its id counters (valid otherwise), or None if it has none."""
    counters = state.get("id_counters")
    if not isinstance(counters, dict):
        return None
    size = len(canonical_json(state).encode())
    grown = dict(counters)
    entry = len('"zz_pad_0000000":1,')
    for i in range(max(0, limit - size) // entry + 16):
        grown[f"zz_pad_{i:07d}"] = 1
    return {**state, "id_counters": grown}


async def _argument_problem(sandbox: Sandbox, ctx: Context, limit: int) -> tuple[str | None, str]:
    tool = next((n for n in ctx.tools if ctx.read_only(n)), next(iter(ctx.tools), None))
    if tool is None:
        return "the manifest lists no tools", ""
    params = list((ctx.tools[tool].get("inputSchema") or {}).get("properties") or {}) or ["padding"]
    arguments = {params[0]: "x" * (limit + 1)}
    try:
        result = await call(sandbox, tool, arguments)
    except TooLarge:
        return None, f"{tool} with {limit + 1:,} bytes of arguments: refused by the server (HTTP 413)"
    if not result.is_error:
        return f"{tool} accepted {limit + 1:,} bytes of arguments (limit {limit:,})", ""
    if "limit" not in result.text and "max_argument_bytes" not in result.text:
        return (
            f"{tool} refused {limit + 1:,} bytes of arguments without naming the size limit: {result.text[:200]}",
            "",
        )
    return None, f"{tool} with {limit + 1:,} bytes of arguments: {result.text[:160]}"


async def _loads(sandbox: Sandbox, state: dict[str, Any]) -> bool:
    try:
        await sandbox.load_state(state)
    except (InvalidState, TooLarge):
        return False
    return True


@check("sandbox.size_limits", "State and argument size limits declared in the manifest are enforced.")
async def size_limits(ctx: Context) -> Outcome:
    limits = ctx.limits
    if not limits:
        return skipped("the manifest declares no size limits (runtime.limits)")
    sandbox = await ctx.main()
    problems, evidence = [], [f"declared: {', '.join(f'{k} {v:,}' for k, v in sorted(limits.items()))}"]
    async with ctx.main_lock:
        await sandbox.reset()
        before = await sandbox.state()
        if (max_args := limits.get("max_argument_bytes")) is not None:
            problem, seen = await _argument_problem(sandbox, ctx, int(max_args))
            problems += [problem] if problem else []
            evidence += [seen] if seen else []
        if (max_state := limits.get("max_state_bytes")) is not None:
            big = _oversized(before, int(max_state))
            if big is None:
                evidence.append("no id_counters in the state: no oversized state was tried")
            elif not await _loads(sandbox, before):
                evidence.append(
                    "the seed's dump does not load back (state.roundtrip): no oversized state was tried"
                )
            else:
                size = len(canonical_json(big).encode())
                try:
                    await sandbox.load_state(big)
                    problems.append(f"a state of {size:,} bytes was accepted (limit {int(max_state):,})")
                except TooLarge as exc:
                    evidence.append(f"a state of {size:,} bytes: refused by the server (HTTP 413: {exc})")
                except InvalidState as exc:
                    if "max_state_bytes" not in str(exc) and "limit" not in str(exc):
                        problems.append(
                            f"a state of {size:,} bytes was refused without naming the limit: {str(exc)[:200]}"
                        )
                    evidence.append(f"a state of {size:,} bytes: {str(exc)[:160]}")
        after = await sandbox.state()
    if canonical_json(before) != canonical_json(after):
        problems.append("a refused oversized request changed the state")
    return verdict(problems, "size limits enforced, nothing changed", "size limits not enforced", evidence)
