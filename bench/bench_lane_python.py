"""The Python cost of one tool call on the environment server's fast path, in process: no sockets, no kernel.

Figures are printed, never asserted. Run from the repository root:

    .venv/bin/python bench/bench_lane_python.py [--runs 60] [--calls 2000] [--before DIR] [--rounds 3]

A pre-encoded `tools/call increment` (the request of `bench/bench_server.py`) is fed to the agent lane's
protocol object (`envreg.server.agent_lane.AgentLane` on uvicorn's HTTP protocol) over a stand-in transport
that keeps what is written, so each call runs the whole Python path: the head's parsing, the lean answer, the
tool's transaction, the answer's head and the keep-alive bookkeeping. It prints the best, 25th percentile and
median of `--runs` runs of `--calls` calls (the best is the steadiest figure on a machine whose speed drifts).
`--before DIR` measures another checkout (e.g. `git worktree add DIR <commit>`) too, alternating the two
`--rounds` times, each in a fresh process.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
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


async def measure(runs: int, calls: int) -> list[float]:
    """Microseconds per call of each run, sorted."""
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
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        for _ in range(calls):
            protocol.data_received(request)
        times.append((time.perf_counter() - t0) / calls * 1e6)
    assert lane.calls == runs * calls + 1, "every call took the fast path"
    return sorted(times)


def run_in(checkout: Path | None, args: argparse.Namespace) -> str:
    """This script's figures for `checkout` (None: this one), from a fresh process."""
    env = {**os.environ, "PYTHONPATH": str(checkout.resolve())} if checkout else None
    argv = [sys.executable, __file__, "--runs", str(args.runs), "--calls", str(args.calls)]
    return subprocess.run(argv, env=env, cwd=ROOT, check=True, capture_output=True, text=True).stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=60)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--before", type=Path, metavar="DIR", help="also measure envreg from this checkout")
    parser.add_argument("--rounds", type=int, default=3, help="alternations with --before")
    args = parser.parse_args()
    if args.before is None:
        import uvloop

        times = uvloop.run(measure(args.runs, args.calls))
        best, p25, median = times[0], times[len(times) // 4], times[len(times) // 2]
        print(f"us per call: best {best:.1f}  p25 {p25:.1f}  median {median:.1f}")
        return
    for r in range(args.rounds):
        print(f"round {r + 1}  this checkout:        {run_in(None, args)}", flush=True)
        print(f"round {r + 1}  {args.before}: {run_in(args.before, args)}", flush=True)


if __name__ == "__main__":
    main()
