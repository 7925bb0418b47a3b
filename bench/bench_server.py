"""Tool-call latency, throughput and server CPU per call: envreg vs the mcp SDK, fastmcp and OpenEnv.

Figures are printed, never asserted. Run from the repository root:

    bench/setup-bench-venv                      # once: .venv-bench (fastmcp), .venv-openenv (openenv)
    .venv-bench/bin/python bench/bench_server.py [--quick] [--env FOLDER]

(`python bench/bench_server.py` from another interpreter re-executes itself under .venv-bench.)

Every server runs as its own subprocess on 127.0.0.1 (uvicorn, uvloop, httptools, access log off)
and exposes the same counter tool `increment(by)`:
  envreg lean     `envreg serve-env tests/fixtures/counter`; each connection gets its own instance
                  (`POST /instances` on the control plane) at /i/<id>/mcp
  envreg SDK      the same with `--no-fast-path` (the mcp SDK inside envreg)
  mcp SDK         `MCPServer` (mcp 2.3.0) streamable HTTP, json_response=True, one shared counter
  fastmcp         `FastMCP` (4.2.3) `http_app(json_response=True)`, one shared counter
  OpenEnv         `create_app` (openenv 0.10.0); each WebSocket /ws gets its own env session. openenv
                  requires fastmcp<4, so this server runs under its own venv, .venv-openenv
MCP servers get pre-encoded HTTP/1.1 2026-07-28 sessionless `tools/call` requests over keep-alive
raw sockets (asyncio + uvloop, status line and Content-Length parsing only); OpenEnv gets
pre-encoded masked WebSocket text frames `{"type":"step","data":{"by":1}}`. Server CPU is read
from /proc/<pid>/stat (utime + stime, all threads) around each timed phase.

All servers are started first and measured in rounds (`--rounds`, 3 by default), each round in another
order, so that the machine's other load hits every server alike; the tables pool the rounds, and envreg
lean against OpenEnv is also shown round by round. On a machine with 2 or more CPUs the servers run on
CPU 0 and the client on CPU 1 (`--no-pin`: anywhere), so that calls/s under load measure the server
rather than the server and the client together. `--before DIR` adds envreg's lean server from another
checkout (e.g. `git worktree add DIR <commit>`), measured in the same rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import resource
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parents[1]
BENCH_VENV_PYTHON = ROOT / ".venv-bench" / "bin" / "python"
OPENENV_VENV_PYTHON = ROOT / ".venv-openenv" / "bin" / "python"  # openenv==0.10.0 (needs fastmcp<4)
MODERN = "2026-07-28"
TOKEN = "bench-token"
REFERENCE = (
    "Measured here for reference: mcp SDK 1.2-2.9 ms server CPU per trivial call, "
    "fastmcp 1.9-4.3 ms, an OpenEnv step 0.36-0.48 ms"
)


# ---------------------------------------------------------------- servers under test (child side)


def _uvicorn_run(app: object, port: int) -> None:
    import uvicorn

    uvicorn.run(
        app,  # type: ignore[arg-type]
        host="127.0.0.1", port=port, loop="uvloop", http="httptools", log_level="warning", access_log=False,
    )  # fmt: skip


def serve_sdk(port: int) -> None:
    """The plain mcp SDK (2.x `MCPServer`, formerly FastMCP) with the counter tool."""
    from mcp.server.mcpserver import MCPServer

    server, state = MCPServer("counter"), {"value": 0}

    @server.tool()
    def increment(by: int = 1) -> int:
        """Add to the counter and return its new value."""
        state["value"] += by
        return state["value"]

    _uvicorn_run(server.streamable_http_app(json_response=True), port)


def serve_fastmcp(port: int) -> None:
    """fastmcp with the counter tool."""
    from fastmcp import FastMCP

    server, state = FastMCP("counter"), {"value": 0}

    @server.tool
    def increment(by: int = 1) -> int:
        """Add to the counter and return its new value."""
        state["value"] += by
        return state["value"]

    _uvicorn_run(server.http_app(path="/mcp", json_response=True), port)


def serve_openenv(port: int) -> None:
    """An OpenEnv environment stepping the counter; one environment per WebSocket session.

    Runs under .venv-openenv (openenv 0.10.0 only, no envreg): only this module's stdlib imports load.
    """
    from openenv.core.env_server.http_server import create_app
    from openenv.core.env_server.interfaces import Environment
    from openenv.core.env_server.types import Action, Observation, State

    class IncrementAction(Action):
        by: int = 1

    class CounterObservation(Observation):
        value: int = 0

    class CounterEnvironment(Environment):
        SUPPORTS_CONCURRENT_SESSIONS = True

        def __init__(self) -> None:
            super().__init__()
            self.value, self._state = 0, State(step_count=0)

        def reset(
            self, seed: int | None = None, episode_id: str | None = None, **kw: object
        ) -> CounterObservation:
            self.value, self._state = 0, State(episode_id=episode_id, step_count=0)
            return CounterObservation(value=0)

        def step(
            self, action: IncrementAction, timeout_s: float | None = None, **kw: object
        ) -> CounterObservation:  # type: ignore[override]
            self.value += action.by
            self._state.step_count += 1
            return CounterObservation(value=self.value)

        @property
        def state(self) -> State:
            return self._state

    app = create_app(
        CounterEnvironment, IncrementAction, CounterObservation, env_name="counter", max_concurrent_envs=256
    )
    _uvicorn_run(app, port)


SERVE = {"sdk": serve_sdk, "fastmcp": serve_fastmcp, "openenv": serve_openenv}


# ---------------------------------------------------------------- process control (parent side)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads), in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Server:
    """A server under test running as a subprocess."""

    name: str
    argv: list[str]
    protocol: str  # "mcp" or "ws"
    control_port: int | None = None
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    log: IO[bytes] | None = None
    env: dict[str, str] | None = None
    cwd: Path = ROOT
    cpus: set[int] | None = None
    """The CPUs the server may run on (None: any)."""

    def start(self, timeout: float = 90) -> None:
        if not Path(self.argv[0]).exists():
            raise RuntimeError(f"{self.argv[0]} is missing: create it with bench/setup-bench-venv")
        self.log = tempfile.NamedTemporaryFile(prefix="bench-server-", suffix=".log")  # noqa: SIM115 (closed in stop)
        cpus = self.cpus
        self.proc = subprocess.Popen(
            self.argv, stdout=self.log, stderr=subprocess.STDOUT, cwd=self.cwd, env=self.env,
            preexec_fn=None if cpus is None else lambda: os.sched_setaffinity(0, cpus),
        )  # fmt: skip
        wait_port = self.control_port or self.port
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                socket.create_connection(("127.0.0.1", wait_port), timeout=1).close()
                if self.control_port is None or self.control("GET", "/healthz") is not None:
                    return self.settle(deadline)
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"{self.name} did not come up within {timeout} s:\n{self.log_tail()}")

    def settle(self, deadline: float) -> None:
        """Wait until the server is idle: envreg imports the mcp SDK in a background thread after it is up."""
        assert self.proc is not None
        last = cpu_seconds(self.proc.pid)
        while time.monotonic() < deadline:
            time.sleep(0.5)
            now = cpu_seconds(self.proc.pid)
            if now - last < 0.02:
                return
            last = now

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.log is not None:
            self.log.close()

    def log_tail(self) -> str:
        assert self.log is not None
        return Path(self.log.name).read_bytes()[-3000:].decode(errors="replace")

    def control(self, method: str, path: str, body: dict | None = None) -> dict | None:
        """A call on envreg's bearer-token control plane."""
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(
            f"http://127.0.0.1:{self.control_port}{path}", data=data, method=method,
            headers={"authorization": f"Bearer {TOKEN}", "content-type": "application/json"},
        )  # fmt: skip
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read() or b"null")

    def mcp_path(self) -> str:
        """The MCP path for one client connection: its own instance on envreg, the one endpoint elsewhere."""
        if self.control_port is None:
            return "/mcp"
        created = self.control("POST", "/instances", {})
        assert created is not None
        return created["mcp_path"]


def envreg_server(env: str, fast_path: bool, checkout: Path | None = None) -> Server:
    """envreg's environment server; `checkout`: envreg's code from that folder instead of this one."""
    control_port = free_port()
    name = "envreg lean" if fast_path else "envreg SDK path"
    server = Server(f"{name} ({checkout.name})" if checkout else name, [], "mcp", control_port)
    if checkout is not None:  # `python -m` puts its working directory first on sys.path
        server.cwd = checkout.resolve()
        server.env = {**os.environ, "PYTHONPATH": str(server.cwd)}
    server.argv = [
        sys.executable, "-m", "envreg.cli.main", "serve-env", env, "--port", str(server.port),
        "--control-port", str(control_port), "--token", TOKEN, *([] if fast_path else ["--no-fast-path"]),
    ]  # fmt: skip
    return server


def child_server(name: str, kind: str) -> Server:
    server = Server(name, [], "ws" if kind == "openenv" else "mcp")
    python = str(OPENENV_VENV_PYTHON) if kind == "openenv" else sys.executable
    server.argv = [python, __file__, "--serve", kind, "--port", str(server.port)]
    return server


# ---------------------------------------------------------------- low-overhead clients


def mcp_call_request(port: int, path: str) -> bytes:
    """A pre-encoded 2026-07-28 sessionless `tools/call increment {"by": 1}`."""
    meta = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    params = {"name": "increment", "arguments": {"by": 1}, "_meta": meta}
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}).encode()
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        f"Accept: application/json, text/event-stream\r\nMcp-Protocol-Version: {MODERN}\r\n"
        f"Mcp-Method: tools/call\r\nMcp-Name: increment\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


class Conn:
    """One keep-alive connection bound to one instance / session; `call()` makes one tool call."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter

    async def call(self) -> bytes:
        raise NotImplementedError

    def close(self) -> None:
        self.writer.close()


class HttpConn(Conn):
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes) -> None:
        self.reader, self.writer, self.request = reader, writer, request

    async def call(self) -> bytes:
        self.writer.write(self.request)
        head = await self.reader.readuntil(b"\r\n\r\n")
        if head[9:12] != b"200":
            raise RuntimeError(f"HTTP {head[:200]!r}")
        start = head.lower().index(b"content-length:") + 15
        return await self.reader.readexactly(int(head[start : head.index(b"\r\n", start)]))


def ws_frame(payload: bytes, opcode: int = 0x1) -> bytes:
    """A masked client frame (fixed mask key: fine on loopback, and lets frames be pre-encoded)."""
    assert len(payload) < 126
    key = b"\x12\x34\x56\x78"
    masked = bytes(b ^ key[i % 4] for i, b in enumerate(payload))
    return bytes([0x80 | opcode, 0x80 | len(payload)]) + key + masked


class WsConn(Conn):
    # what openenv 0.10.0's EnvClient sends per step: {"type": "step", "data": <action fields>}
    STEP = ws_frame(b'{"type":"step","data":{"by":1}}')

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    async def call(self, frame: bytes = STEP) -> bytes:
        self.writer.write(frame)
        while True:
            b0, b1 = await self.reader.readexactly(2)
            n = b1 & 0x7F
            if n >= 126:
                n = int.from_bytes(await self.reader.readexactly(2 if n == 126 else 8), "big")
            payload = await self.reader.readexactly(n)
            if b0 & 0x0F == 0x9:  # ping
                self.writer.write(ws_frame(payload, 0xA))
                continue
            return payload


async def connect(server: Server) -> Conn:
    """Open one connection (and, on envreg, create its instance; on OpenEnv, reset its session)."""
    path = await asyncio.to_thread(server.mcp_path) if server.protocol == "mcp" else "/ws"
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if server.protocol == "mcp":
        conn: Conn = HttpConn(reader, writer, mcp_call_request(server.port, path))
        reply = json.loads(await conn.call())
        assert reply["result"]["isError"] is False, reply
        return conn
    key = base64.b64encode(os.urandom(16)).decode()
    writer.write(
        f"GET /ws HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode()
    )
    head = await reader.readuntil(b"\r\n\r\n")
    assert head[9:12] == b"101", head
    ws = WsConn(reader, writer)
    assert json.loads(await ws.call(ws_frame(b'{"type":"reset","data":{}}')))["type"] == "observation"
    assert json.loads(await ws.call())["data"]["observation"]["value"] == 1
    return ws


# ---------------------------------------------------------------- measurement


@dataclass
class Result:
    server: str
    mode: str
    calls: int
    wall_s: float
    latencies: list[float]
    server_cpu_s: float
    client_cpu_s: float
    round: int = 0

    @classmethod
    def pooled(cls, results: list[Result]) -> Result:
        """One server's and mode's rounds as one measurement (calls and times summed)."""
        first = results[0]
        return cls(
            first.server, first.mode, sum(r.calls for r in results), sum(r.wall_s for r in results),
            [x for r in results for x in r.latencies], sum(r.server_cpu_s for r in results),
            sum(r.client_cpu_s for r in results), -1,
        )  # fmt: skip

    def pct(self, q: float) -> float:
        lat = sorted(self.latencies)
        return lat[min(len(lat) - 1, int(q * len(lat)))] * 1e3

    @property
    def rate(self) -> float:
        return self.calls / self.wall_s

    @property
    def cpu_ms(self) -> float:
        return self.server_cpu_s / self.calls * 1e3


def client_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


async def drive(conn: Conn, n: int, out: list[float]) -> None:
    call, clock = conn.call, time.perf_counter
    for _ in range(n):
        t0 = clock()
        await call()
        out.append(clock() - t0)


async def measure(server: Server, mode: str, conns: int, calls: int, warmup: int) -> Result:
    """`conns` connections, each making `warmup` then `calls` calls concurrently; only the latter timed."""
    assert server.proc is not None
    pool = [await connect(server) for _ in range(conns)]
    try:
        await asyncio.gather(*(drive(c, warmup, []) for c in pool))
        lats: list[list[float]] = [[] for _ in pool]
        cpu0, ccpu0, t0 = cpu_seconds(server.proc.pid), client_cpu(), time.perf_counter()
        await asyncio.gather(*(drive(c, calls, out) for c, out in zip(pool, lats, strict=True)))
        wall = time.perf_counter() - t0
        server_cpu, ccpu = cpu_seconds(server.proc.pid) - cpu0, client_cpu() - ccpu0
    finally:
        for c in pool:
            c.close()
    flat = [x for lat in lats for x in lat]
    return Result(server.name, mode, len(flat), wall, flat, server_cpu, ccpu)


async def bench_server(server: Server, seq_calls: int, conc: int, conc_calls: int) -> list[Result]:
    """One round on a started server: sequential calls, then `conc` connections at once."""
    seq = await measure(server, "seq", 1, seq_calls, warmup=max(50, seq_calls // 10))
    par = await measure(server, f"{conc} conc", conc, conc_calls, warmup=max(5, conc_calls // 10))
    return [seq, par]


def bench_rounds(
    servers: list[Server], rounds: int, seq_calls: int, conc: int, conc_calls: int, pin: bool
) -> list[Result]:
    """Every server measured once per round, round r starting at server r (a rotation of the order);
    `pin`: the servers on the first CPU this process may use, this client on the second."""
    import uvloop

    cpus = sorted(os.sched_getaffinity(0))
    up = []
    for server in servers:
        if pin:
            server.cpus = {cpus[0]}
        try:
            server.start()
            up.append(server)
        except Exception as exc:  # one broken server should not hide the others' figures
            print(f"  {server.name} failed to start: {type(exc).__name__}: {exc}")
    results: list[Result] = []
    if pin:
        os.sched_setaffinity(0, {cpus[1]})
    try:
        for r in range(rounds):
            for server in up[r % len(up) :] + up[: r % len(up)]:
                print(f"round {r + 1}/{rounds}: {server.name} ...", flush=True)
                try:
                    measured = uvloop.run(bench_server(server, seq_calls, conc, conc_calls))
                except Exception as exc:
                    print(f"  {server.name} failed: {type(exc).__name__}: {exc}")
                    continue
                for result in measured:
                    result.round = r + 1
                results += measured
    finally:
        os.sched_setaffinity(0, cpus)
        for server in servers:
            server.stop()
    return results


def bench_local(env: str, calls: int) -> list[tuple[str, float]]:
    """Calls/s of the in-process tier: a bare instance, and a `Runtime` sandbox with isolation="local"."""
    from envreg.env import load_environment

    instance = load_environment(env).instance()
    t0 = time.perf_counter()
    for _ in range(calls):
        instance.call_tool("increment", {"by": 1})
    rows = [("env.instance().call_tool", calls / (time.perf_counter() - t0))]

    async def via_runtime() -> float:
        from envreg.runtime import Runtime

        async with Runtime() as rt:
            sandbox = await rt.sandbox(env, isolation="local")
            t0 = time.perf_counter()
            for _ in range(calls):
                await sandbox.call_tool("increment", {"by": 1})
            return calls / (time.perf_counter() - t0)

    try:
        rows.append(('Runtime().sandbox(isolation="local").call_tool', asyncio.run(via_runtime())))
    except Exception as exc:  # the runtime is under active development; report rather than crash
        print(f"Runtime local tier failed: {type(exc).__name__}: {exc}")
    return rows


# ---------------------------------------------------------------- report


def pool(results: list[Result]) -> list[Result]:
    """The rounds of each (server, mode) pooled, in the order the servers were first measured."""
    groups: dict[tuple[str, str], list[Result]] = {}
    for r in results:
        groups.setdefault((r.server, r.mode), []).append(r)
    return [Result.pooled(group) for group in groups.values()]


def rounds_table(results: list[Result], conc: int) -> Any:
    """envreg lean against OpenEnv, round by round and pooled (issue 25's three figures)."""
    from rich.table import Table

    lean, openenv = "envreg lean", "OpenEnv (WebSocket)"
    by = {(r.server, r.mode, r.round): r for r in [*results, *pool(results)]}
    table = Table(title="envreg lean vs OpenEnv, each round (the same machine load for both)")
    for col in ("round", f"calls/s at {conc}", "x", f"server CPU ms/call at {conc}", "sequential p50 ms"):
        table.add_column(col, justify="right")
    for r in [*sorted({r.round for r in results}), -1]:
        ours, theirs = by.get((lean, f"{conc} conc", r)), by.get((openenv, f"{conc} conc", r))
        seq_ours, seq_theirs = by.get((lean, "seq", r)), by.get((openenv, "seq", r))
        if not (ours and theirs and seq_ours and seq_theirs):
            continue
        table.add_row(
            "pooled" if r == -1 else str(r), f"{ours.rate:,.0f} vs {theirs.rate:,.0f}",
            f"{ours.rate / theirs.rate:.2f}x", f"{ours.cpu_ms:.3f} vs {theirs.cpu_ms:.3f}",
            f"{seq_ours.pct(0.5):.3f} vs {seq_theirs.pct(0.5):.3f}",
        )  # fmt: skip
    return table


def print_report(results: list[Result], local: list[tuple[str, float]], args: argparse.Namespace) -> None:
    from rich.console import Console
    from rich.table import Table

    rounds, results = results, pool(results)
    lean = {r.mode: r for r in results if r.server == "envreg lean"}
    table = Table(
        title=f"Tool call `increment` over loopback ({os.cpu_count()} CPUs, env {args.env}, "
        f"{args.rounds} rounds pooled)"
    )
    for col in ("server", "mode", "calls", "p50 ms", "p99 ms", "calls/s", "server CPU ms/call",
                "client CPU ms/call", "CPU/call vs lean", "calls/s vs lean"):  # fmt: skip
        table.add_column(col, justify="left" if col in ("server", "mode") else "right")
    for r in results:
        ref = lean.get(r.mode)
        table.add_row(
            r.server, r.mode, str(r.calls), f"{r.pct(0.5):.3f}", f"{r.pct(0.99):.3f}", f"{r.rate:,.0f}",
            f"{r.cpu_ms:.3f}", f"{r.client_cpu_s / r.calls * 1e3:.3f}",
            f"{r.cpu_ms / ref.cpu_ms:.2f}x" if ref else "-", f"{r.rate / ref.rate:.2f}x" if ref else "-",
        )  # fmt: skip
    console = Console()
    if not console.is_terminal:
        console = Console(width=170)
    console.print(table)
    console.print(rounds_table(rounds, args.concurrency))
    local_table = Table(title=f"Local tier, in process ({args.local_calls} calls)")
    local_table.add_column("path")
    local_table.add_column("calls/s", justify="right")
    local_table.add_column("us/call", justify="right")
    for name, rate in local:
        local_table.add_row(name, f"{rate:,.0f}", f"{1e6 / rate:.1f}")
    console.print(local_table)
    console.print(REFERENCE)
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    where = (
        "the servers on CPU 0, the client on CPU 1"
        if args.pin
        else f"the servers share this machine's {os.cpu_count()} CPUs with it"
    )
    console.print(
        f"Client: one asyncio+uvloop process, raw keep-alive sockets; {where} (load average now {load}). "
        "Latency under 50 connections is closed-loop."
    )


def ensure_bench_venv() -> None:
    """Re-execute under .venv-bench when fastmcp is missing here; say how to make it if absent.

    (openenv is not needed here: its server runs under .venv-openenv, and the client is a raw WebSocket.)
    """
    try:
        import fastmcp  # noqa: F401
    except ImportError:
        if (
            BENCH_VENV_PYTHON.exists()
            and Path(sys.prefix).resolve() != BENCH_VENV_PYTHON.parents[1].resolve()
        ):
            os.execv(BENCH_VENV_PYTHON, [str(BENCH_VENV_PYTHON), __file__, *sys.argv[1:]])
        sys.exit(
            "fastmcp is not installed here (it is not an envreg dependency).\n"
            "Create the benchmark venv with `bench/setup-bench-venv`, then run\n"
            "  .venv-bench/bin/python bench/bench_server.py"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="a short run (500 seq calls, 50 x 20 concurrent)"
    )
    parser.add_argument(
        "--env", default=str(ROOT / "tests" / "fixtures" / "counter"), help="environment for envreg"
    )
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument(
        "--no-pin", dest="pin", action="store_false", help="let servers and client share every CPU"
    )
    parser.add_argument(
        "--before", type=Path, metavar="DIR", help="also envreg's lean server from this checkout"
    )
    parser.add_argument("--rounds", type=int, help="rounds over all servers (default 3; --quick: 1)")
    parser.add_argument("--serve", choices=sorted(SERVE), help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        SERVE[args.serve](args.port)
        return
    ensure_bench_venv()
    seq_calls, conc_calls = (500, 20) if args.quick else (2000, 100)
    args.rounds = args.rounds or (1 if args.quick else 3)
    args.local_calls = 2000 if args.quick else 20000
    servers = [
        envreg_server(args.env, fast_path=True),
        *([envreg_server(args.env, fast_path=True, checkout=args.before)] if args.before else []),
        envreg_server(args.env, fast_path=False),
        child_server("mcp SDK (MCPServer)", "sdk"),
        child_server("fastmcp", "fastmcp"),
        child_server("OpenEnv (WebSocket)", "openenv"),
    ]
    args.pin = args.pin and len(os.sched_getaffinity(0)) >= 2  # pinning needs a CPU each
    results = bench_rounds(servers, args.rounds, seq_calls, args.concurrency, conc_calls, args.pin)
    print_report(results, bench_local(args.env, args.local_calls), args)


if __name__ == "__main__":
    main()
