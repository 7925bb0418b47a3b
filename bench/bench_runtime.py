"""Runtime figures: acquire latency, gateway overhead, snapshot / restore / fork, density, vs a stdio baseline.

Figures are printed side by side at the end of one run, never asserted. Needs the Docker engine and the
environment images (`envreg build`). Run from the repository root:

    .venv/bin/python bench/bench_runtime.py [--quick] [--env calendar] [--max-instances 1000] [--max-containers 64]

Sections (all on the environment image `--env`, default `calendar`, trivial tool `list_calendars`):
  1. acquire latency from a warm pool (instance tier, container tier), vs a cold container-tier acquire
     (no pool) and a bare `docker run --rm envreg/base:latest true`. The pools' refill targets are set
     to 0 (`rt.pool_sizes.clear()`) right after `rt.warm(...)`, so no background refill runs while
     acquires are timed. Each acquire is followed by a first tool call (`sb.call_tool`, direct).
  2. tool-call latency through the gateway vs straight to the sandbox's agent plane (container IP on
     the runtime's internal network), sequential keep-alive calls from a separate client process
     (the gateway runs in this process's event loop; a client here would compete with it). Where the
     gateway reaches containers on their Unix sockets (a root runtime, a local engine), also straight
     to that socket, and the lane with its upstream on the port as before.
  3. snapshot / restore of a ~1 MB state (the calendar seed plus generated contacts, a valid state)
     on the local, instance and container tiers; fork x8 from it, with warm pools and cold.
  4. the most sandboxes held at once (instance tier, container tier), one tool call on each,
     errors counted, memory per sandbox from `docker stats --no-stream`.
  6. container-tier turnover (`--only recycle`): one sandbox after another (acquire, first call, close),
     a new container per sandbox (started, then removed) vs `Runtime(recycle=1)` (the ended sandbox's
     container serves the next from a fresh server process), alternating in one run.
  5. baseline: a fresh stdio MCP server subprocess per conversation (how EnvFactory's trainer
     integration isolates conversations), spawn -> first tool result, vs warm-pool acquire + first call.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

MODERN = "2026-07-28"
TOOLS = {  # a trivial read-only tool per reference image (no state change, small result)
    "calendar": ("list_calendars", {}),
    "bank": ("get_balance", {"account_id": "acc_0001"}),
}
TARGETS = {
    "instance": "target p50 < 2 ms",
    "container": "target p50 < 10 ms",
}
REFERENCE = (
    "Reference (from the issue): an OpenEnv WebSocket session is created in 3.6 ms; "
    "a bare `docker run` takes about 470 ms."
)
clock = time.perf_counter


def pct(values: list[float], q: float) -> float:
    """Nearest-rank percentile (p99 of fewer than 100 samples is the maximum)."""
    s = sorted(values)
    return s[max(0, min(len(s) - 1, math.ceil(q * len(s)) - 1))]


def ms(x: float) -> str:
    v = x * 1e3
    return f"{v:.3f}" if v < 1 else f"{v:.2f}" if v < 10 else f"{v:.1f}" if v < 100 else f"{v:,.0f}"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- the client process (section 2)


def call_request(host: str, port: int, path: str, token: str, tool: str, arguments: dict) -> bytes:
    """A pre-encoded 2026-07-28 sessionless `tools/call`, with the gateway's bearer token if given."""
    meta = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    params = {"name": tool, "arguments": arguments, "_meta": meta}
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}).encode()
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
        f"Accept: application/json, text/event-stream\r\nMcp-Protocol-Version: {MODERN}\r\n"
        f"Mcp-Method: tools/call\r\nMcp-Name: {tool}\r\n{auth}Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


async def client_main(spec: dict) -> dict:
    """Sequential keep-alive calls with bench_server's raw-socket client; latencies of the timed ones."""
    from bench_server import HttpConn, client_cpu

    if spec.get("unix"):
        reader, writer = await asyncio.open_unix_connection(spec["unix"])
    else:
        reader, writer = await asyncio.open_connection(spec["host"], spec["port"])
        writer.transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    conn = HttpConn(
        reader,
        writer,
        call_request(
            spec["host"], spec["port"], spec["path"], spec["token"], spec["tool"], spec["arguments"]
        ),
    )
    errors = 0
    for _ in range(spec["warmup"]):
        reply = json.loads(await conn.call())
        errors += bool("error" in reply or reply["result"].get("isError"))
    lat: list[float] = []
    cpu0, t0 = client_cpu(), clock()
    for _ in range(spec["calls"]):
        t = clock()
        await conn.call()
        lat.append(clock() - t)
    wall, cpu = clock() - t0, client_cpu() - cpu0
    reply = json.loads(await conn.call())
    errors += bool("error" in reply or reply["result"].get("isError"))
    conn.close()
    made = spec["warmup"] + spec["calls"] + 1
    return {"lat": lat, "wall": wall, "client_cpu": cpu, "errors": errors, "made": made}


async def run_client(
    host: str,
    port: int,
    path: str,
    token: str,
    tool: str,
    arguments: dict,
    calls: int,
    unix: str | None = None,
) -> dict:
    """`calls` timed calls from a client process, to `host`:`port` (or the Unix socket `unix`)."""
    import anyio

    spec = {"host": host, "port": port, "path": path, "token": token, "tool": tool,
            "arguments": arguments, "calls": calls, "warmup": max(50, calls // 10), "unix": unix}  # fmt: skip
    done = await anyio.run_process([sys.executable, __file__, "--client", json.dumps(spec)], check=False)
    if done.returncode != 0:
        raise RuntimeError(f"client exited {done.returncode}: {done.stderr.decode()[-2000:]}")
    return json.loads(done.stdout)


# ---------------------------------------------------------------- helpers


def big_calendar_state(target_bytes: int) -> dict:
    """The calendar seed plus generated contacts until its canonical JSON is about `target_bytes`."""
    from envreg.canonical import canonical_json

    state = json.loads((ROOT / "images" / "calendar" / "seed.json").read_text())
    first = state["id_counters"]["con"] + 1
    size = len(canonical_json(state))
    per = len(canonical_json(_contact(first)))
    n = max(0, (target_bytes - size) // (per + 14))
    for i in range(first, first + n):
        state["contacts"][f"con_{i:05d}"] = _contact(i)
    state["id_counters"]["con"] = first + n - 1
    return state


def _contact(i: int) -> dict:
    return {
        "id": f"con_{i:05d}",
        "name": f"Generated Contact {i}",
        "email": f"contact.{i}@bench.example",
        "company": f"Company {i % 97}",
        "phone": f"+1 555 {i:07d}",
    }


_UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "kB": 1e3, "MB": 1e6, "GB": 1e9}


def container_memory(ids: list[str]) -> dict[str, float]:
    """Memory usage (bytes) per container, as `docker stats --no-stream` reports it."""
    if not ids:
        return {}
    out = subprocess.run(
        ["docker", "stats", "--no-stream", "--no-trunc", "--format", "{{.ID}}\t{{.MemUsage}}", *ids],
        capture_output=True, text=True, timeout=120,
    ).stdout  # fmt: skip
    usage = {}
    for line in out.splitlines():
        cid, mem = line.split("\t")
        m = re.match(r"([\d.]+)\s*([A-Za-z]+)", mem.split("/")[0].strip())
        if m:
            usage[cid] = float(m.group(1)) * _UNITS.get(m.group(2), 1)
    return usage


async def close_all(sandboxes: list) -> None:
    import anyio

    limiter = anyio.CapacityLimiter(16)

    async def one(sb: Any) -> None:
        async with limiter:
            await sb.close()

    async with anyio.create_task_group() as tg:
        for sb in sandboxes:
            tg.start_soon(one, sb)
    sandboxes.clear()


class Runtimes:
    """Every `Runtime` this benchmark opens, so that the end can check nothing of theirs is left."""

    ids: list[str] = []
    store: Any = None

    @classmethod
    def new(cls, **kw: Any) -> Any:
        from envreg.runtime import Runtime

        rt = Runtime(snapshots=cls.store, reap_interval=5.0, gateway=True, **kw)
        cls.ids.append(rt.id)
        return rt


# ---------------------------------------------------------------- 1. acquire latency


async def bench_acquire(args: argparse.Namespace, R: dict) -> None:
    tool, arguments = TOOLS[args.env]
    async with Runtimes.new() as rt:
        for tier, n in (("instance", args.acquire_instances), ("container", args.warm_containers)):
            log(f"acquire: warming {n} on the {tier} tier")
            t0 = clock()
            await rt.warm(args.image, tier, n)
            spec = await rt.resolve(args.image, tier)
            pool = rt._isolated.warm[spec.key, tier == "container"]
            R[f"warm_fill_{tier}"] = (n, clock() - t0)
            rt.pool_sizes.clear()  # refill target 0: no background refill while acquires are timed
            acq, first, held = [], [], []
            before = len(pool)
            for _ in range(n):
                t0 = clock()
                sb = await rt.sandbox(args.image, isolation=tier)
                t1 = clock()
                result = await sb.call_tool(tool, arguments)
                t2 = clock()
                assert result.error is None, result.error
                acq.append(t1 - t0)
                first.append(t2 - t0)
                held.append(sb)
            R[f"acquire_{tier}"], R[f"first_call_{tier}"] = acq, first
            R[f"misses_{tier}"] = n - (before - len(pool))
            await close_all(held)
        log(f"acquire: {args.cold_runs} cold container-tier acquires (no pool)")
        cold, cold_first = [], []
        for _ in range(args.cold_runs):
            t0 = clock()
            sb = await rt.sandbox(args.image, isolation="container")
            t1 = clock()
            await sb.call_tool(tool, arguments)
            cold.append(t1 - t0)
            cold_first.append(clock() - t0)
            await sb.close()
        R["acquire_cold_container"], R["first_call_cold_container"] = cold, cold_first
    log(f"acquire: {args.cold_runs} x docker run --rm envreg/base:latest true")
    runs = []
    for _ in range(args.cold_runs):
        t0 = clock()
        await asyncio.to_thread(
            subprocess.run, ["docker", "run", "--rm", "envreg/base:latest", "true"], check=True,
            capture_output=True,
        )  # fmt: skip
        runs.append(clock() - t0)
    R["docker_run"] = runs


# ---------------------------------------------------------------- 2. gateway vs direct


async def asgi_gateway(rt: Any) -> tuple[Any, int]:
    """The gateway as every call went through it before the fast lane: the ASGI app alone, same lookups."""
    import uvicorn

    from envreg.http.serving import QuietServer
    from envreg.runtime.gateway import Gateway

    config = uvicorn.Config(Gateway(rt.get, rt._http), host="127.0.0.1", port=0, lifespan="off",
                            log_level="warning", access_log=False)  # fmt: skip
    server = QuietServer(config)
    asyncio.get_running_loop().create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.01)
    return server, server.servers[0].sockets[0].getsockname()[1]


@contextlib.contextmanager
def upstream_on_port(sb: Any) -> Iterator[None]:
    """The sandbox routed without its Unix socket meanwhile: the gateway's lane reaches it on its port."""
    kept, sb.server.agent_socket = sb.server.agent_socket, None
    sb.__dict__.pop("upstream", None)  # (a cached property)
    try:
        yield
    finally:
        sb.server.agent_socket = kept
        sb.__dict__.pop("upstream", None)


async def bench_gateway(args: argparse.Namespace, R: dict) -> None:
    tool, arguments = TOOLS[args.env]
    rows = []
    async with Runtimes.new() as rt:
        for tier in ("instance", "container"):
            sb = await rt.sandbox(args.image, isolation=tier)
            asgi, asgi_port = await asgi_gateway(rt)
            gw_host, gw_port = rt.gateway_url.removeprefix("http://").rsplit(":", 1)
            up, lane = sb.upstream, f"/sandboxes/{sb.id}/mcp"
            paths = [  # name, host, port, path, token, Unix socket, the lane's upstream on the port
                ("direct", up.host, up.port, up.path, up.token, None, False),
                ("gateway, ASGI (before)", "127.0.0.1", asgi_port, lane, sb.token, None, False),
                ("gateway, fast lane", gw_host, int(gw_port), lane, sb.token, None, False),
            ]
            if up.socket:  # the lane reaches the container on its Unix socket: also measured on its port
                paths[2:2] = [("direct, its Unix socket", up.host, up.port, up.path, up.token, up.socket, False),
                              ("gateway, fast lane, TCP upstream", gw_host, int(gw_port), lane, sb.token, None, True)]  # fmt: skip
            for _ in range(args.gateway_rounds):  # alternate, so that load on the machine hits all alike
                for path_name, host, port, path, token, unix, on_port in paths:
                    log(f"gateway: {args.calls} calls, {tier} tier, {path_name}")
                    with upstream_on_port(sb) if on_port else contextlib.nullcontext():
                        r = await run_client(host, port, path, token, tool, arguments, args.calls, unix)
                    rows.append((tier, path_name, r))
            asgi.should_exit = True
            await sb.close()
    merged: dict[tuple[str, str], dict] = {}
    for tier, path_name, r in rows:
        m = merged.setdefault((tier, path_name), {"lat": [], "wall": 0.0, "client_cpu": 0.0, "errors": 0})
        m["lat"] += r["lat"]
        m["wall"] += r["wall"]
        m["client_cpu"] += r["client_cpu"]
        m["errors"] += r["errors"]
    R["gateway"] = [(tier, path_name, r) for (tier, path_name), r in merged.items()]


# ---------------------------------------------------------------- 3. snapshot / restore / fork


async def old_snapshot(rt: Any, sb: Any) -> Any:
    """The previous protocol: the whole state over the wire, canonical JSON and its hash on this host."""
    return rt.snapshots.put(sb.env, sb.env_digest, await sb.state())


async def old_restore(sb: Any, snap: Any) -> None:
    """The previous protocol: the whole state sent back, validated again by the server."""
    await sb.load_state(snap.state)


async def old_fork(rt: Any, snap: Any, n: int, tier: str, env: Any) -> list:
    """The previous fork: n sandboxes, each sent the whole state."""
    import anyio

    forks: list = []

    async def one() -> None:
        sb = await rt.sandbox(env, isolation=tier)
        await old_restore(sb, snap)
        forks.append(sb)

    async with anyio.create_task_group() as tg:
        for _ in range(n):
            tg.start_soon(one)
    return forks


async def bench_snapshots(args: argparse.Namespace, R: dict) -> None:
    """Snapshot / restore / fork x8 of a 1 MB state, by hash (now) and with the previous protocol, in
    alternating rounds on each tier."""
    import anyio

    from envreg.canonical import canonical_json

    state = big_calendar_state(args.state_bytes)
    R["state_bytes"] = len(canonical_json(state))
    R["state_contacts"] = len(state["contacts"])
    env = {"local": "calendar", "instance": args.calendar_image, "container": args.calendar_image}
    rows: dict[tuple[str, str, str], list[float]] = {}

    def timed(tier: str, what: str, how: str, seconds: float) -> None:
        rows.setdefault((tier, what, how), []).append(seconds)

    async with Runtimes.new() as rt:
        for tier in ("local", "instance", "container"):
            log(f"snapshot: {tier} tier, {R['state_bytes'] / 1e6:.2f} MB state")
            t0 = clock()
            sb = await rt.sandbox(env[tier], isolation=tier, state=state)
            timed(tier, "create with the state", "-", clock() - t0)
            snap = None
            for _ in range(args.snap_reps):
                for how in ("by hash", "previous"):
                    if snap is not None:  # so that every snapshot writes its file, as a new state would
                        rt.snapshots.path(snap.address).unlink(missing_ok=True)
                    t0 = clock()
                    snap = await (sb.snapshot() if how == "by hash" else old_snapshot(rt, sb))
                    timed(tier, "snapshot", how, clock() - t0)
            snap = await sb.snapshot()
            for _ in range(args.snap_reps):
                for how in ("by hash", "previous"):
                    t0 = clock()
                    await (sb.restore(snap) if how == "by hash" else old_restore(sb, snap))
                    timed(tier, "restore", how, clock() - t0)
                    assert await sb.state_sha256() == snap.sha256
            pools = [("", 0)] if tier == "local" else [("warm pool", 8), ("cold", 0)]
            if tier == "container":
                pools.insert(1, ("warm pool holding the snapshot", 8))
            for pool, warm in pools:
                reps = args.fork_reps_local if tier == "local" else args.fork_reps[tier]
                if pool == "cold" and tier == "container":
                    reps = 1
                for _ in range(reps):
                    for how in ("by hash", "previous") if "holding" not in pool else ("by hash",):
                        if warm:
                            held = snap if "holding" in pool else None
                            await rt.warm(env[tier], tier, warm, snapshot=held)
                            rt.pool_sizes.clear()
                        log(f"fork x8: {tier} tier, {pool or 'in process'}, {how}")
                        target = None if tier == "local" else env[tier]
                        t0 = clock()
                        if how == "by hash":
                            children = await rt.fork(snap, 8, isolation=tier, env=target)
                        else:
                            children = await old_fork(rt, snap, 8, tier, target or env[tier])
                        timed(tier, f"fork x8{', ' + pool if pool else ''}", how, clock() - t0)
                        assert len(children) == 8
                        assert await children[-1].state_sha256() == snap.sha256
                        await close_all(children)
                        await anyio.sleep(0.2)
            await sb.close()
    R["stateplane"] = rows


# ---------------------------------------------------------------- 4. density


async def bench_density(args: argparse.Namespace, R: dict) -> None:
    R["density"] = []
    for tier, target in (("instance", args.max_instances), ("container", args.max_containers)):
        R["density"].append(await density_tier(args, tier, target))


async def density_tier(args: argparse.Namespace, tier: str, target: int) -> dict:
    import anyio

    tool, arguments = TOOLS[args.env]
    held: list = []
    acquire_errors: list[str] = []
    call_errors: list[str] = []
    limiter = anyio.CapacityLimiter(16)

    async def lease(rt: Any) -> None:
        async with limiter:
            try:
                held.append(await rt.sandbox(args.image, isolation=tier))
            except Exception as exc:
                acquire_errors.append(f"{type(exc).__name__}: {exc}"[:200])

    async def call(sb: Any) -> None:
        async with limiter:
            try:
                result = await sb.call_tool(tool, arguments)
                if result.error is not None:
                    call_errors.append(result.error[:200])
            except Exception as exc:
                call_errors.append(f"{type(exc).__name__}: {exc}"[:200])

    async with Runtimes.new() as rt:
        log(f"density: acquiring {target} on the {tier} tier")
        t0 = clock()
        async with anyio.create_task_group() as tg:
            for _ in range(target):
                tg.start_soon(lease, rt)
        acquire_s = clock() - t0
        log(f"density: one call on each of {len(held)}")
        t0 = clock()
        async with anyio.create_task_group() as tg:
            for sb in held:
                tg.start_soon(call, sb)
        call_s = clock() - t0
        containers = sorted({sb.server.id for sb in held})
        log(f"density: docker stats on {len(containers)} containers")
        mem = await asyncio.to_thread(container_memory, containers)
        alive, acquired = sum(not sb.ended for sb in held), len(held)
        log(f"density: releasing {acquired}")
        await close_all(held)
    return {
        "tier": tier, "target": target, "acquired": acquired, "alive": alive,
        "acquire_errors": acquire_errors, "call_errors": call_errors, "acquire_s": acquire_s,
        "call_s": call_s, "containers": len(containers), "measured": len(mem),
        "mem_total": sum(mem.values()), "mem_max": max(mem.values(), default=0),
    }  # fmt: skip


# ---------------------------------------------------------------- 5. stdio baseline


async def bench_stdio(args: argparse.Namespace, R: dict) -> None:
    from mcp import Client, StdioServerParameters

    script = str(ROOT / "bench" / "stdio_counter.py")
    times = []
    log(f"stdio baseline: {args.stdio_runs} spawns")
    for _ in range(args.stdio_runs):
        t0 = clock()
        async with Client(StdioServerParameters(command=sys.executable, args=[script])) as client:
            result = await client.call_tool("increment", {"by": 1})
            times.append(clock() - t0)
            assert not result.is_error and result.content[0].text == "1", result
    R["stdio"] = times


async def bench_local_first_call(args: argparse.Namespace, R: dict) -> None:
    """Local tier (in process) acquire + first call, for scale."""
    tool, arguments = TOOLS[args.env]
    times = []
    async with Runtimes.new() as rt:
        await (await rt.sandbox(args.env, isolation="local")).close()  # import and digest once
        for _ in range(args.acquire_instances):
            t0 = clock()
            sb = await rt.sandbox(args.env, isolation="local")
            await sb.call_tool(tool, arguments)
            times.append(clock() - t0)
            await sb.close()
    R["first_call_local"] = times


# ---------------------------------------------------------------- 6. container turnover


async def bench_recycle(args: argparse.Namespace, R: dict) -> None:
    tool, arguments = TOOLS[args.env]
    runs = args.cold_runs * 2
    log(f"recycle: {runs} container-tier sandboxes one after another, new container vs recycled")
    async with Runtimes.new() as fresh, Runtimes.new(recycle=1) as recycling:
        for rt in (fresh, recycling):  # the first sandbox of each starts a container either way
            await (await rt.sandbox(args.image, isolation="container")).close()
        for _ in range(runs):
            for key, rt in (("turnover_new", fresh), ("turnover_recycled", recycling)):
                t0 = clock()
                sb = await rt.sandbox(args.image, isolation="container")
                assert (await sb.call_tool(tool, arguments)).error is None
                await sb.close()
                R.setdefault(key, []).append(clock() - t0)


# ---------------------------------------------------------------- report


def acquire_table(args: argparse.Namespace, R: dict, console: Any) -> None:
    from rich.table import Table

    t = Table(title=f"1. Acquire latency ({args.env}; pool refill target set to 0 after warm-up)")
    for col in ("what", "n", "p50 ms", "p99 ms", "target / reference"):
        t.add_column(col, justify="left" if col in ("what", "target / reference") else "right")

    def row(name: str, key: str, note: str = "") -> None:
        if key in R:
            v = R[key]
            t.add_row(name, str(len(v)), ms(pct(v, 0.5)), ms(pct(v, 0.99)), note)

    row(
        f"instance tier, warm pool ({R['warm_fill_instance'][0]} warmed)",
        "acquire_instance",
        TARGETS["instance"],
    )
    row(
        f"container tier, warm pool ({R['warm_fill_container'][0]} warmed)",
        "acquire_container",
        TARGETS["container"],
    )
    row("container tier, cold (no pool)", "acquire_cold_container", "")
    row("docker run --rm envreg/base:latest true", "docker_run", "reference ~470 ms")
    t.add_row("OpenEnv WebSocket session (from the issue)", "-", "3.6", "-", "reference")
    console.print(t)
    misses = {k.removeprefix("misses_"): v for k, v in R.items() if k.startswith("misses_")}
    console.print(f"  warm-pool misses during the timed acquires (each a cold start): {misses}")
    console.print(f"  image pinned for the run: {args.image[:40]}")
    for tier in ("instance", "container"):
        if f"warm_fill_{tier}" in R:
            n, s = R[f"warm_fill_{tier}"]
            console.print(
                f"  rt.warm({args.env!r}, {tier!r}, {n}) took {s:.2f} s ({s / n * 1e3:.1f} ms per unit)"
            )
    console.print(REFERENCE)


def report(args: argparse.Namespace, R: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console() if sys.stdout.isatty() else Console(width=170)
    tool, _ = TOOLS[args.env]

    if "acquire_instance" in R or "acquire_container" in R:
        acquire_table(args, R, console)

    if "gateway" in R:
        t = Table(title=f"2. Tool call `{tool}` via the gateway vs direct (separate client process, "
                        f"1 keep-alive connection, sequential)")  # fmt: skip
        for col in ("tier", "path", "calls", "p50 ms", "p99 ms", "calls/s", "client CPU ms/call", "errors",
                    "gateway adds (p50)"):  # fmt: skip
            t.add_column(col, justify="left" if col in ("tier", "path") else "right")
        direct = {}
        for tier, path, r in R["gateway"]:
            p50 = pct(r["lat"], 0.5)
            if path == "direct":
                direct[tier] = p50
            added = f"+{(p50 - direct[tier]) * 1e3:.3f} ms" if path != "direct" and tier in direct else ""
            t.add_row(tier, path, str(len(r["lat"])), f"{p50 * 1e3:.3f}", f"{pct(r['lat'], 0.99) * 1e3:.3f}",
                      f"{len(r['lat']) / r['wall']:,.0f}", f"{r['client_cpu'] / len(r['lat']) * 1e3:.3f}",
                      str(r["errors"]), added)  # fmt: skip
        console.print(t)
        console.print("direct = the sandbox's agent plane at <container IP>:8000 on the runtime's internal "
                      "network; gateway = rt.gateway_url/sandboxes/<id>/mcp with the sandbox's bearer token "
                      "(runs in the benchmark process's event loop); the fast lane reaches the container on its "
                      "Unix socket where it has one (`docker_sockets`)")  # fmt: skip

    if "stateplane" in R:
        t = Table(title=f"3. Snapshot / restore / fork x8 of a {R['state_bytes'] / 1e6:.2f} MB calendar state "
                        f"({R['state_contacts']} contacts): by hash (now) vs the previous protocol, same run")  # fmt: skip
        for col in (
            "tier",
            "what",
            "n",
            "now p50 ms",
            "now p99 ms",
            "previous p50 ms",
            "previous p99 ms",
            "x",
        ):
            t.add_column(col, justify="left" if col in ("tier", "what") else "right")
        seen = []
        for tier, what, _ in R["stateplane"]:
            if (tier, what) not in seen:
                seen.append((tier, what))
        for tier, what in seen:
            now = R["stateplane"].get((tier, what, "by hash")) or R["stateplane"].get((tier, what, "-"))
            old = R["stateplane"].get((tier, what, "previous"))
            ratio = f"{pct(old, 0.5) / pct(now, 0.5):,.0f}x" if old else ""
            t.add_row(tier, what, str(len(now)), ms(pct(now, 0.5)), ms(pct(now, 0.99)),
                      ms(pct(old, 0.5)) if old else "", ms(pct(old, 0.99)) if old else "", ratio)  # fmt: skip
        console.print(t)
        console.print("now: the server keeps snapshots by hash; a snapshot writes the durable copy here (its file is "
                      "deleted between repetitions, so each one downloads and writes it); restore and fork name the "
                      "snapshot, and a server that lacks it gets it once, gzip-compressed (the container tier's warm "
                      "pool: 8 new servers, 8 uploads). previous: the whole state over the wire each time (GET for a "
                      "snapshot, PUT for a restore, one PUT per fork), validated again by the server.")  # fmt: skip

    if "density" in R:
        t = Table(title="4. Sandboxes held at once, one tool call on each")
        for col in (
            "tier",
            "asked",
            "acquired",
            "alive",
            "acq. errors",
            "call errors",
            "acquire s",
            "calls s",
            "containers",
            "mem total MiB",
            "per sandbox MiB",
            "max/container MiB",
        ):
            t.add_column(col, justify="left" if col == "tier" else "right")
        for d in R["density"]:
            per = d["mem_total"] / max(1, d["acquired"]) / 2**20
            t.add_row(d["tier"], str(d["target"]), str(d["acquired"]), str(d["alive"]),
                      str(len(d["acquire_errors"])), str(len(d["call_errors"])), f"{d['acquire_s']:.1f}",
                      f"{d['call_s']:.2f}", f"{d['containers']} ({d['measured']} measured)",
                      f"{d['mem_total'] / 2**20:,.0f}", f"{per:.2f}", f"{d['mem_max'] / 2**20:.0f}")  # fmt: skip
        console.print(t)
        by = {d["tier"]: d for d in R["density"]}
        if (
            "instance" in by
            and "container" in by
            and by["container"]["acquired"]
            and by["instance"]["acquired"]
        ):
            i, c = by["instance"], by["container"]
            base = c["mem_total"] / c["acquired"]
            extra = (i["mem_total"] - i["containers"] * base) / i["acquired"]
            console.print(
                f"instance tier beyond a one-sandbox container's footprint ({base / 2**20:.1f} MiB, from the "
                f"container tier row): {extra / 2**10:,.0f} KiB per extra sandbox"
            )
        for d in R["density"]:
            for e in (d["acquire_errors"] + d["call_errors"])[:5]:
                console.print(f"  {d['tier']} error: {e}")
        console.print("memory = `docker stats --no-stream` MemUsage (cgroup usage the CLI reports) summed over the "
                      "runtime's containers; container limit 256 MiB each; instance tier packs 256 per container")  # fmt: skip

    if "stdio" in R:
        t = Table(title="5. Time to first tool call: fresh stdio MCP server per conversation vs envreg")
        for col in (
            "how a conversation gets its environment",
            "n",
            "p50 ms",
            "p99 ms",
            "stdio p50 / this p50",
        ):
            t.add_column(col, justify="left" if col.startswith("how") else "right")
        base = pct(R["stdio"], 0.5)
        rows = [
            ("stdio MCP server subprocess (mcp SDK MCPServer, spawn -> first result)", "stdio"),
            ("envreg instance tier, warm pool: acquire + first call", "first_call_instance"),
            ("envreg container tier, warm pool: acquire + first call", "first_call_container"),
            ("envreg container tier, cold: acquire + first call", "first_call_cold_container"),
            ("envreg local tier (in process): acquire + first call", "first_call_local"),
        ]
        for name, key in rows:
            if key in R:
                v = R[key]
                t.add_row(name, str(len(v)), ms(pct(v, 0.5)), ms(pct(v, 0.99)), f"{base / pct(v, 0.5):,.1f}x")
        console.print(t)
        console.print(f"first call = `{tool}` via sb.call_tool (the runtime's own client, straight to the "
                      "container); stdio = `mcp.Client(StdioServerParameters(...))` connect + initialize + "
                      "`increment`")  # fmt: skip
    if "turnover_new" in R:
        t = Table(
            title="6. Container-tier turnover: one sandbox after another (acquire + first call + close)"
        )
        for col in ("each sandbox's container", "n", "p50 ms", "p99 ms", "x"):
            t.add_column(col, justify="left" if col.startswith("each") else "right")
        base = pct(R["turnover_new"], 0.5)
        for name, key in (
            ("new (docker run, then removed)", "turnover_new"),
            ("recycled: Runtime(recycle=1), a fresh server process", "turnover_recycled"),
        ):
            v = R[key]
            t.add_row(name, str(len(v)), ms(pct(v, 0.5)), ms(pct(v, 0.99)), f"{base / pct(v, 0.5):,.1f}x")
        console.print(t)
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    console.print(f"{os.cpu_count()} CPUs, load average now {load}; event loop: "
                  f"{'uvloop' if args.uvloop else 'asyncio'}; total {time.monotonic() - args.t_start:.0f} s; "
                  f"left behind by this run: {R.get('leftovers', '?')}")  # fmt: skip


def leftovers() -> str:
    """Containers and networks of this run's runtimes still in the engine (removed here if any)."""
    found = []
    for rid in Runtimes.ids:
        for kind in ("ps", "network"):
            cmd = ["docker", kind, "ls", "-q", "--filter", f"label=io.envreg.runtime={rid}"]
            if kind == "ps":
                cmd = ["docker", "ps", "-aq", "--filter", f"label=io.envreg.runtime={rid}"]
            ids = subprocess.run(cmd, capture_output=True, text=True).stdout.split()
            if ids:
                found.append(f"{len(ids)} {'containers' if kind == 'ps' else 'networks'} of {rid}")
                rm = ["docker", "rm", "-f"] if kind == "ps" else ["docker", "network", "rm"]
                subprocess.run([*rm, *ids], capture_output=True)
    return ", ".join(found) or "nothing"


SECTIONS = {
    "acquire": bench_acquire,
    "gateway": bench_gateway,
    "snapshot": bench_snapshots,
    "density": bench_density,
    "stdio": bench_stdio,
    "recycle": bench_recycle,
}


async def amain(args: argparse.Namespace) -> dict:
    from envreg.runtime.snapshots import SnapshotStore

    R: dict = {}
    import docker

    from envreg.runtime.images import resolve_image

    client = docker.from_env()
    # Pin the image for the whole run: a name resolves to the newest image at each acquire, so a rebuild
    # in the middle of the run would make every acquire miss the warm pool (keyed by image ID).
    args.image = f"{args.env}@{resolve_image(client, args.env)}"
    args.calendar_image = f"calendar@{resolve_image(client, 'calendar')}"
    client.close()
    log(f"pinned {args.image}")
    with tempfile.TemporaryDirectory(prefix="envreg-bench-snapshots-") as tmp:
        Runtimes.store = SnapshotStore(Path(tmp))
        for name in args.only or list(SECTIONS):
            try:
                await SECTIONS[name](args, R)
                if name == "stdio":
                    await bench_local_first_call(args, R)
            except Exception as exc:  # report what ran rather than lose every figure
                import traceback

                traceback.print_exc()
                log(f"section {name} failed: {type(exc).__name__}: {exc}")
    return R


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a short run (smaller pools, fewer repetitions)")
    parser.add_argument("--env", default="calendar", choices=sorted(TOOLS), help="environment image")
    parser.add_argument(
        "--max-instances", type=int, help="instance-tier sandboxes held at once (1000; quick 256)"
    )
    parser.add_argument(
        "--max-containers", type=int, help="container-tier sandboxes held at once (64; quick 16)"
    )
    parser.add_argument("--calls", type=int, help="sequential calls per gateway/direct run (1000; quick 300)")
    parser.add_argument("--only", nargs="*", choices=list(SECTIONS), help="run only these sections")
    parser.add_argument("--no-uvloop", action="store_true")
    parser.add_argument("--client", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.client:
        print(json.dumps(asyncio.run(client_main(json.loads(args.client)))))
        return
    q = args.quick
    args.max_instances = args.max_instances or (256 if q else 1000)
    args.max_containers = args.max_containers or (16 if q else 64)
    args.calls = args.calls or (300 if q else 1000)
    args.gateway_rounds = 2 if q else 3
    args.acquire_instances = 50 if q else 100
    args.warm_containers = 8 if q else 16
    args.cold_runs = 3 if q else 5
    args.snap_reps = 5 if q else 10
    args.fork_reps_local = 5 if q else 10
    args.fork_reps = {"instance": 2 if q else 5, "container": 1 if q else 2}
    args.stdio_runs = 5 if q else 10
    args.state_bytes = 1_000_000
    args.t_start = time.monotonic()
    import anyio

    args.uvloop = not args.no_uvloop
    try:
        import uvloop  # noqa: F401
    except ImportError:
        args.uvloop = False
    try:
        R = anyio.run(amain, args, backend_options={"use_uvloop": args.uvloop})
    finally:
        found = leftovers()
    R["leftovers"] = found
    report(args, R)


if __name__ == "__main__":
    main()
