"""An environment server's CPU while idle (what each pooled or waiting sandbox costs) and the time it takes
to end on SIGTERM (what `docker stop`, a runtime's close and every test's teardown wait for), this checkout
beside another one in the same run.

Each round starts `envreg serve-env` (no Docker), waits until both planes answer, reads the process's CPU
time (/proc schedstat, nanoseconds) over `--idle` seconds without a request, then sends SIGTERM and times
until the process has ended; rounds alternate between the checkouts so that load hits both alike.

    .venv/bin/python bench/bench_stop.py [--rounds 10] [--idle 2] [--before DIR] [ENV]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))


def cpu_seconds(pid: int) -> float:
    tasks = Path(f"/proc/{pid}/task")
    return sum(int((t / "schedstat").read_text().split()[0]) for t in tasks.iterdir()) / 1e9


def idle_and_stop(env: str, checkout: Path, idle: float) -> tuple[float, float]:
    """Start the server of `checkout` (its folder first on sys.path) and wait until it answers; its CPU
    seconds per second while idle, and the seconds from SIGTERM to its end."""
    from servers import EnvServerProcess

    server = EnvServerProcess(env, cwd=checkout, environ={"PYTHONPATH": str(checkout)}).start()
    proc = server.proc
    assert proc is not None
    try:
        before = cpu_seconds(proc.pid)
        time.sleep(idle)
        idle_cpu = (cpu_seconds(proc.pid) - before) / idle
        began = time.perf_counter()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(30)
        took = time.perf_counter() - began
    finally:
        server.stop()
    assert code == -signal.SIGTERM, f"{checkout}: ended with {code}"
    return idle_cpu, took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("env", nargs="?", default="calendar")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--idle", type=float, default=2.0, help="seconds idle per round")
    ap.add_argument("--before", type=Path, metavar="DIR", help="also the server of this checkout")
    args = ap.parse_args()
    checkouts = {
        "now": ROOT,
        **({f"before ({args.before.name})": args.before.resolve()} if args.before else {}),
    }
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in checkouts}
    for _ in range(args.rounds):
        for name, checkout in checkouts.items():
            runs[name].append(idle_and_stop(args.env, checkout, args.idle))
    print(
        f"\n`envreg serve-env {args.env}`, {args.rounds} rounds: CPU while idle ({args.idle:g} s a round), SIGTERM to end"
    )
    print(f"{'server':<24} {'idle CPU ms/s':>14} {'stop p50 ms':>12} {'stop max ms':>12}")
    for name, measured in runs.items():
        idle_cpu, took = zip(*measured, strict=True)
        print(f"{name:<24} {statistics.median(idle_cpu) * 1e3:>14.2f} {statistics.median(took) * 1e3:>12.0f} "
              f"{max(took) * 1e3:>12.0f}")  # fmt: skip
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"{os.cpu_count()} CPUs, load average {load}")


if __name__ == "__main__":
    main()
