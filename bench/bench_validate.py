"""`envreg validate` wall time: per environment and for the whole catalog, at 1 and 2 images at a time.

Runs the validation in process (one runtime, one TypeScript worker per run) over the given environment
folders (default: every folder under images/) and prints each environment's wall time, its slowest checks,
and the total. Needs the images (`envreg build`) and npm (the TypeScript validators install on first use).

    python bench/bench_validate.py [--jobs 1 2] [NAMES...]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parent.parent


async def run(targets: list[str], jobs: int) -> tuple[float, list]:
    from envreg.validate import validate

    t0 = time.perf_counter()
    reports = await validate(targets, jobs=jobs)
    return time.perf_counter() - t0, reports


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("names", nargs="*", help="environments (default: every folder under images/)")
    parser.add_argument("--jobs", type=int, nargs="+", default=[1, 2], help="images at a time (each a run)")
    args = parser.parse_args()
    names = args.names or sorted(p.parent.name for p in (ROOT / "images").glob("*/env.py"))
    targets = [str(ROOT / "images" / n) for n in names]
    for jobs in args.jobs:
        total, reports = anyio.run(run, targets, jobs)
        print(f"\n--jobs {jobs}: {len(reports)} environments in {total:.1f} s")
        print(f"{'environment':28} {'wall s':>7} {'checks':>7} {'failed':>7}  slowest checks")
        for r in reports:
            slow = sorted(r.results, key=lambda c: -c.seconds)[:2]
            failed = sum(c.status == "fail" for c in r.results)
            shown = ", ".join(f"{c.name} {c.seconds:.1f}s" for c in slow)
            print(
                f"{r.label:28} {r.seconds:7.1f} {len(r.results):7d} {failed:7d}  {shown}{'  ' + r.error if r.error else ''}"
            )
        walls = [r.seconds for r in reports]
        print(f"per environment: median {statistics.median(walls):.1f} s, max {max(walls):.1f} s")


if __name__ == "__main__":
    main()
