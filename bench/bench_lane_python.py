"""The Python cost of one tool call on a fast path, in process: no sockets, no kernel.

Figures are printed, never asserted. Run from the repository root:

    .venv/bin/python bench/bench_lane_python.py [--front agent|gateway] [--cold] [--runs 60] [--calls 2000]
        [--before DIR] [--rounds 3]

`--front agent` (the default): a pre-encoded `tools/call increment` (the request of `bench/bench_server.py`)
is fed to the agent lane's protocol object (`envreg.server.agent_lane.AgentLane` on uvicorn's HTTP protocol)
over a stand-in transport that keeps what is written, so each call runs the whole Python path: the head's
parsing, the lean answer, the tool's transaction, the answer's head and the keep-alive bookkeeping.
`--front gateway`: the gateway's fast lane (`envreg.runtime.fastlane.Lane`) takes a sandbox's `tools/call`
(`bench/bench_runtime.py`'s request), writes it to a pooled stand-in upstream connection, and is fed the
server's answer: the whole relay in both directions. `--cold` touches 8 MiB between calls, as the other
processes on a call's path do to the caches between a relay's two halves.

It prints the best, 25th percentile and median of `--runs` runs of `--calls` calls (the best is the steadiest
figure on a machine whose speed drifts). `--before DIR` measures another checkout (e.g. `git worktree add DIR
<commit>`) too, alternating the two `--rounds` times, each in a fresh process.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


class Transport:
    """What the protocol writes to, kept; never closing."""

    def __init__(self) -> None:
        self.last = b""

    def write(self, data: bytes) -> None:
        self.last = data

    def is_closing(self) -> bool:
        return False

    def get_extra_info(self, name: str, default: object = None) -> object:
        return {"sockname": ("127.0.0.1", 8000), "peername": ("127.0.0.1", 50000)}.get(name, default)

    def close(self) -> None:
        pass

    def set_write_buffer_limits(self, *args: object, **kwargs: object) -> None:
        pass


async def measure(runs: int, calls: int, cold: bool) -> list[float]:
    """Microseconds per call of the agent lane, each run's, sorted."""
    import uvicorn
    from uvicorn.server import ServerState

    from envreg.server.agent_lane import AgentLane
    from envreg.server.app import EnvServer, ServerConfig

    sys.path.insert(0, str(ROOT / "bench"))
    from bench_server import mcp_call_request

    server = EnvServer.build(ServerConfig(env=str(ROOT / "tests" / "fixtures" / "counter"), token="t"))
    instance_id, _ = server.store.create()
    lane = AgentLane(server.agent, 5, server.lease)
    config = uvicorn.Config(server.agent, http=lane.protocol(), log_level="warning", access_log=False)
    config.load()
    state = ServerState()
    state.default_headers = [(b"date", b"Mon, 07 Dec 2026 00:00:00 GMT"), (b"server", b"uvicorn")]
    protocol = lane.protocol()(
        config=config, server_state=state, app_state={}, _loop=asyncio.get_running_loop()
    )
    transport = Transport()
    protocol.connection_made(transport)  # type: ignore[arg-type]
    request = mcp_call_request(8000, f"/i/{instance_id}/mcp")
    protocol.data_received(request)
    assert transport.last.startswith(b"HTTP/1.1 200"), transport.last[:300]
    times = timed(lambda: protocol.data_received(request), runs, calls, cold)
    assert lane.calls == runs * calls + 1, "every call took the fast path"
    return times


ANSWER = (
    b'{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"0"}],"isError":false,'
    b'"structuredContent":{"result":0},"_meta":{"io.modelcontextprotocol/serverInfo":{"name":"counter"}}}}'
)


async def measure_gateway(runs: int, calls: int, cold: bool) -> list[float]:
    """Microseconds per call relayed by the gateway's fast lane, both ways, each run's, sorted."""
    import uvicorn
    from bench_gateway import Route
    from bench_runtime import call_request
    from uvicorn.server import ServerState

    from envreg.runtime.backends.base import Upstream
    from envreg.runtime.fastlane import Lane
    from envreg.runtime.fastlane import Upstream as Connection
    from envreg.runtime.gateway import Gateway

    route = Route("sb_" + "0" * 16, "t" * 32, Upstream("10.0.0.2", 8000, "/mcp", "a" * 22, "server"))
    lane = Lane({route.id: route}.get)
    config = uvicorn.Config(Gateway(lane.lookup, None), http=lane.protocol(), log_level="warning")  # type: ignore[arg-type]
    config.load()
    state = ServerState()
    state.default_headers = [(b"date", b"Mon, 07 Dec 2026 00:00:00 GMT"), (b"server", b"uvicorn")]
    loop = asyncio.get_running_loop()
    protocol = lane.protocol()(config=config, server_state=state, app_state={}, _loop=loop)
    client, server = Transport(), Transport()
    protocol.connection_made(client)  # type: ignore[arg-type]
    connection = Connection(("server", "10.0.0.2", 8000))
    connection.connection_made(server)  # type: ignore[arg-type]
    connection.idle_since = loop.time()
    lane.idle[connection.key].append(connection)
    request = call_request("127.0.0.1", 8000, f"/sandboxes/{route.id}/mcp", route.token, "get", {})
    answer = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%b" % (
        len(ANSWER), ANSWER)  # fmt: skip

    def call() -> None:
        protocol.data_received(request)
        connection.data_received(answer)

    call()
    assert server.last.startswith(b"POST /mcp ") and client.last.startswith(b"HTTP/1.1 200"), client.last
    times = timed(call, runs, calls, cold)
    assert lane.calls == runs * calls + 1, "every call took the lane"
    return times


def timed(call: Callable[[], None], runs: int, calls: int, cold: bool) -> list[float]:
    """Microseconds per call of each of `runs` runs, sorted; `cold`: 8 MiB touched before each call."""
    junk = bytearray(8 << 20 if cold else 0)
    lines = len(junk[::64])
    times = []
    for _ in range(runs):
        took = 0.0
        if cold:
            for _ in range(calls):
                junk[::64] = b"x" * lines
                start = time.perf_counter()
                call()
                took += time.perf_counter() - start
        else:  # one clock read per run, as this bench always timed warm calls
            start = time.perf_counter()
            for _ in range(calls):
                call()
            took = time.perf_counter() - start
        times.append(took / calls * 1e6)
    return sorted(times)


def run_in(checkout: Path | None, args: argparse.Namespace) -> str:
    """This script's figures for `checkout` (None: this one), from a fresh process."""
    env = {**os.environ, "PYTHONPATH": str(checkout.resolve())} if checkout else None
    argv = [
        sys.executable,
        __file__,
        "--front",
        args.front,
        "--runs",
        str(args.runs),
        "--calls",
        str(args.calls),
    ]
    argv += ["--cold"] if args.cold else []
    return subprocess.run(argv, env=env, cwd=ROOT, check=True, capture_output=True, text=True).stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--front", choices=("agent", "gateway"), default="agent")
    parser.add_argument("--cold", action="store_true", help="touch 8 MiB between calls")
    parser.add_argument("--runs", type=int, default=60)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--before", type=Path, metavar="DIR", help="also measure envreg from this checkout")
    parser.add_argument("--rounds", type=int, default=3, help="alternations with --before")
    args = parser.parse_args()
    if args.before is None:
        import uvloop

        front = measure_gateway if args.front == "gateway" else measure
        times = uvloop.run(front(args.runs, args.calls, args.cold))
        best, p25, median = times[0], times[len(times) // 4], times[len(times) // 2]
        print(f"us per call: best {best:.1f}  p25 {p25:.1f}  median {median:.1f}")
        return
    for r in range(args.rounds):
        print(f"round {r + 1}  this checkout:        {run_in(None, args)}", flush=True)
        print(f"round {r + 1}  {args.before}: {run_in(args.before, args)}", flush=True)


if __name__ == "__main__":
    main()
