"""`envreg --help`: this checkout's CLI (the lazy command table) against a baseline checkout's (default: the
main checkout beside this worktree, whose CLI imports every command module, the runtime with them).

    .venv/bin/python bench/bench_cli.py [--runs 7] [--baseline /work/main] [--save bench/figures/cli.md]

Each run is a new process (interpreter start included); prints the medians of wall time and of CPU time
(user + system: what the process itself spent, steadier than wall time on a shared machine) side by side,
with their ratio.
`--save` writes the Markdown table that `scripts/readme-figures` puts into the README.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

HELP = "from envreg.cli.main import app\ntry:\n    app(['--help'], prog_name='envreg')\nexcept SystemExit:\n    pass\n"
ROOT = Path(__file__).resolve().parent.parent


def median_seconds(root: Path, runs: int) -> tuple[float, float]:
    """(wall, CPU) medians over `runs` new processes."""
    walls, cpus = [], []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        subprocess.run(
            [sys.executable, "-c", HELP],
            check=True,
            stdout=subprocess.DEVNULL,
            cwd=root,
            env={"PYTHONPATH": str(root)},
        )
        walls.append(time.perf_counter() - started)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return statistics.median(walls), statistics.median(cpus)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--save", type=Path)
    ap.add_argument("--baseline", type=Path, default=ROOT.parent / "main")
    args = ap.parse_args()
    for root in (ROOT, args.baseline):
        median_seconds(root, 1)  # warm the bytecode caches
    lazy, eager = median_seconds(ROOT, args.runs), median_seconds(args.baseline, args.runs)
    table = (
        f"| `envreg --help`, new process, median of {args.runs} | {args.baseline.name} (baseline) "
        "| this checkout | now vs baseline |\n| --- | --- | --- | --- |\n"
    )
    for label, i in (("wall time", 0), ("CPU time (user + system)", 1)):
        table += f"| {label} | {eager[i]:.2f} s | {lazy[i]:.2f} s | {lazy[i] / eager[i]:.2f}x |\n"
    print(table, end="")
    if args.save:
        args.save.parent.mkdir(parents=True, exist_ok=True)
        args.save.write_text(table)


if __name__ == "__main__":
    main()
