"""Gateway overhead per tool call: the fast lane vs the ASGI gateway vs straight to the server, in one run.

One environment server (`envreg serve-env`, the counter of tests/fixtures/counter, agent-plane token
on, as in a sandbox container, its agent plane also on a Unix socket) and, in this process's event loop,
two gateways routing the same sandbox id (the ASGI gateway alone, the path every call took before the
lane, and the gateway with its fast lane, reaching the server on its port or on its Unix socket as it
reaches a sandbox container that has one) and a splice that relays bytes without reading them (the
floor of any relay process).
A separate client process makes sequential keep-alive `tools/call` requests on raw sockets; rounds
alternate the paths so that load on the machine hits all of them alike. "relay CPU" is this process's
CPU time per call on each path.
No Docker needed (bench_runtime.py measures the same through real sandboxes).

    .venv/bin/python bench/bench_gateway.py [--calls 2000] [--rounds 5] [--no-uvloop]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests"))


@dataclass
class Route:
    """What the gateway needs to route one sandbox id: its token and where its server is."""

    id: str
    token: str
    upstream: object
    ended: str | None = None


async def serve(app: object, http: object | None = None) -> tuple[object, int]:
    import uvicorn

    from envreg.http.serving import QuietServer

    config = uvicorn.Config(app, host="127.0.0.1", port=0, lifespan="off", log_level="warning", access_log=False,
                            **({"http": http} if http else {}))  # fmt: skip
    server = QuietServer(config)
    asyncio.get_running_loop().create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.01)
    return server, server.servers[0].sockets[0].getsockname()[1]


class Splice(asyncio.Protocol):
    """A relay that forwards bytes both ways and reads none of them (one upstream connection per client
    connection): what any extra process on the path costs, whatever it does with the request."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.peer: asyncio.Transport | None = None
        self.pending: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        asyncio.get_running_loop().create_task(self.connect())

    async def connect(self) -> None:
        loop = asyncio.get_running_loop()
        self.peer, _ = await loop.create_connection(lambda: SpliceBack(self.transport), *self.upstream)
        for data in self.pending:
            self.peer.write(data)

    def data_received(self, data: bytes) -> None:
        if self.peer is None:
            self.pending.append(data)
        else:
            self.peer.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.peer is not None:
            self.peer.close()


class SpliceBack(asyncio.Protocol):
    """The splice's upstream side: the server's bytes, written to the client as they come."""

    def __init__(self, client: asyncio.BaseTransport) -> None:
        self.client = client

    def data_received(self, data: bytes) -> None:
        self.client.write(data)  # type: ignore[attr-defined]

    def connection_lost(self, exc: Exception | None) -> None:
        self.client.close()


async def main(args: argparse.Namespace) -> None:
    import httpx2
    from bench_runtime import pct, run_client
    from servers import EnvServerProcess

    from envreg.runtime.backends.base import Upstream
    from envreg.runtime.fastlane import Lane
    from envreg.runtime.gateway import Gateway

    agent_token = secrets.token_urlsafe(16)
    folder = Path(tempfile.mkdtemp(prefix="envreg-bench-"))
    agent_socket = str(folder / "agent.sock")
    server = EnvServerProcess(str(ROOT / "tests/fixtures/counter"),
                              extra=["--agent-token", agent_token, "--agent-socket", agent_socket])  # fmt: skip
    server.start()
    try:
        tcp = Upstream("127.0.0.1", server.port, "/mcp", agent_token, "bench")
        route = Route("sb_" + secrets.token_hex(8), secrets.token_urlsafe(24), tcp)
        unix = Route(
            "sb_" + secrets.token_hex(8), secrets.token_urlsafe(24), replace(tcp, socket=agent_socket)
        )
        lookup = {route.id: route, unix.id: unix}.get
        async with httpx2.AsyncClient() as http:
            asgi = Gateway(lookup, http)
            lane = Lane(lookup)
            laned = Gateway(lookup, http)
            _, asgi_port = await serve(asgi)
            _, lane_port = await serve(laned, lane.protocol())
            splice = await asyncio.get_running_loop().create_server(
                lambda: Splice(("127.0.0.1", server.port)), "127.0.0.1", 0
            )
            splice_port = splice.sockets[0].getsockname()[1]
            paths = {
                "direct": (server.port, "/mcp", agent_token),
                "bytes relayed, nothing read": (splice_port, "/mcp", agent_token),
                "gateway, ASGI only (before)": (asgi_port, f"/sandboxes/{route.id}/mcp", route.token),
                "gateway, fast lane, TCP": (lane_port, f"/sandboxes/{route.id}/mcp", route.token),
                "gateway, fast lane, Unix": (lane_port, f"/sandboxes/{unix.id}/mcp", unix.token),
            }
            results: dict[str, list[float]] = {name: [] for name in paths}
            cpu: dict[str, float] = dict.fromkeys(paths, 0.0)
            for r in range(args.rounds):
                for name, (port, path, token) in paths.items():
                    before = time.process_time()
                    out = await run_client("127.0.0.1", port, path, token, "get", {}, args.calls)
                    cpu[name] += (time.process_time() - before) / out["made"]
                    assert out["errors"] == 0, out
                    results[name] += out["lat"]
                print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
            assert lane.calls >= 2 * args.rounds * args.calls, "the lane did not take the calls"
    finally:
        server.stop()
        shutil.rmtree(folder, ignore_errors=True)
    direct = statistics.median(results["direct"])
    print(f"\nsequential tools/call (counter `get`), {args.rounds} x {args.calls} calls per path, "
          f"1 keep-alive connection, client in its own process; loop: {'uvloop' if args.uvloop else 'asyncio'}")  # fmt: skip
    print(f"{'path':<30} {'p50 ms':>8} {'p99 ms':>8} {'adds p50 ms':>12} {'relay CPU ms':>13}")
    for name, lat in results.items():
        p50 = statistics.median(lat)
        adds = relay = ""
        if name != "direct":  # this process's CPU per call, less what starting a client costs it (direct's)
            adds = f"{(p50 - direct) * 1e3:+.3f}"
            relay = f"{(cpu[name] - cpu['direct']) / args.rounds * 1e3:.3f}"
        print(f"{name:<30} {p50 * 1e3:>8.3f} {pct(lat, 0.99) * 1e3:>8.3f} {adds:>12} {relay:>13}")
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"{os.cpu_count()} CPUs, load average {load}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-uvloop", action="store_true")
    args = parser.parse_args()
    args.uvloop = not args.no_uvloop
    if args.uvloop:
        import uvloop

        uvloop.run(main(args))
    else:
        asyncio.run(main(args))
