"""How long an environment server takes to end on SIGTERM (what `docker stop`, a runtime's close and every
test's teardown wait for), this checkout beside another one in the same run.

Each round starts `envreg serve-env` (no Docker), waits until both planes answer, sends SIGTERM and times
until the process has ended; rounds alternate between the checkouts so that load hits both alike.

    .venv/bin/python bench/bench_stop.py [--rounds 20] [--before DIR] [ENV]
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "bench-stop"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop_seconds(env: str, checkout: Path) -> float:
    """Start the server of `checkout` (its folder first on sys.path), wait for both planes, SIGTERM it."""
    import httpx2

    ports = free_port(), free_port()
    argv = [sys.executable, "-m", "envreg.cli.main", "serve-env", env, "--port", str(ports[0]),
            "--control-port", str(ports[1]), "--token", TOKEN]  # fmt: skip
    proc = subprocess.Popen(argv, cwd=checkout, env={**os.environ, "PYTHONPATH": str(checkout)})
    try:
        for port in ports:  # both planes answer (any status)
            while True:
                assert proc.poll() is None, f"{checkout}: the server ended with {proc.returncode}"
                try:
                    httpx2.get(
                        f"http://127.0.0.1:{port}/healthz", headers={"authorization": f"Bearer {TOKEN}"}
                    )
                    break
                except httpx2.TransportError:
                    time.sleep(0.02)
        began = time.perf_counter()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(30)
        took = time.perf_counter() - began
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert code == -signal.SIGTERM, f"{checkout}: ended with {code}"
    return took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("env", nargs="?", default="calendar")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--before", type=Path, metavar="DIR", help="also the server of this checkout")
    args = ap.parse_args()
    checkouts = {
        "now": ROOT,
        **({f"before ({args.before.name})": args.before.resolve()} if args.before else {}),
    }
    took: dict[str, list[float]] = {name: [] for name in checkouts}
    for _ in range(args.rounds):
        for name, checkout in checkouts.items():
            took[name].append(stop_seconds(args.env, checkout))
    print(f"\nSIGTERM to process end, `envreg serve-env {args.env}`, {args.rounds} rounds")
    print(f"{'server':<24} {'p50 ms':>8} {'max ms':>8}")
    for name, seconds in took.items():
        print(f"{name:<24} {statistics.median(seconds) * 1e3:>8.0f} {max(seconds) * 1e3:>8.0f}")
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"{os.cpu_count()} CPUs, load average {load}")


if __name__ == "__main__":
    main()
