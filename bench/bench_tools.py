"""What each environment's tools cost in process (no server, no HTTP): every step of every scenario of the
catalog, replayed on an instance `--repeat` times; microseconds per call by environment (each step's median,
averaged over the steps), this checkout beside another one (`--before DIR`, in a subprocess with that
folder first on sys.path).

    .venv/bin/python bench/bench_tools.py [--repeat 20] [--before DIR] [ENV...]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from side_by_side import measured_in, print_beside

ROOT = Path(__file__).resolve().parents[1]


def measure(names: list[str], repeat: int) -> dict[str, float]:
    """Seconds per tool call of each environment: each scenario step's median over the replays, averaged
    over the steps (a search over every record weighs as much as it costs, noise does not)."""
    from envreg.env import load_environment, load_scenarios

    out: dict[str, float] = {}
    for name in names:
        env = load_environment(name)
        scenarios, _ = load_scenarios(env.folder)
        took: dict[tuple[int, int], list[float]] = {}
        for _ in range(repeat):
            for s, scenario in enumerate(scenarios):
                instance = env.instance(scenario.initial_state)
                for i, step in enumerate(scenario.steps):
                    began = time.perf_counter()
                    instance.call_tool(step.tool, step.arguments)
                    took.setdefault((s, i), []).append(time.perf_counter() - began)
        out[name] = statistics.fmean(statistics.median(t) for t in took.values())
    return out


def catalog() -> list[str]:
    return sorted(
        p.parent.name for p in (ROOT / "images").glob("*/env.py") if not p.parent.name.startswith("tau2-")
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="*", help="environments (default: the catalog's, tau2's left out)")
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--before", type=Path, metavar="DIR", help="also this checkout's tools")
    ap.add_argument("--json", action="store_true", help=argparse.SUPPRESS)  # what --before reads back
    args = ap.parse_args()
    names = args.names or catalog()
    now = measure(names, args.repeat)
    if args.json:
        print(json.dumps(now))
        return
    before = measured_in(args.before, __file__, ["--repeat", str(args.repeat), *names]) if args.before else {}
    title = f"µs per tool call (each scenario step's median of {args.repeat} replays, averaged), in process"
    print_beside(title, "environment", now, before, 1e6, 1)


if __name__ == "__main__":
    main()
