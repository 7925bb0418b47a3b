"""The state plane in process: what a writing tool costs on a growing state, now and the way it was.

Calendar states of ~10 KB, ~100 KB and ~1 MB (the seed plus generated contacts); on each, writing tools
(`create_event`, `update_event`, `invite_attendee`) run on an `Instance` (committed state: journaled
writes, O(change)) and with the previous semantics (deep copy, the tool, a full revalidation; the same
code `tests/cow_helpers.reference_call` checks the new one against), in alternating rounds. Also what a
server pays to take in a state (an upload: gunzip, hash, validation, commit) and to hand one out.
No Docker needed.

    .venv/bin/python bench/bench_stateplane.py [--sizes 10000 100000 1000000] [--calls 200]
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests"))
os.environ.setdefault("ENVREG_IMAGES", str(ROOT / "images"))
clock = time.perf_counter


def calls(i: int) -> list[tuple[str, dict]]:
    """Three writing calls that succeed on the calendar seed, on a fresh day each time."""
    day = f"2026-03-{1 + i % 28:02d}"
    hour = 8 + i % 9
    return [
        ("create_event", {"calendar_id": "cal_0001", "title": f"Bench {i}",
                          "start": f"{day}T{hour:02d}:00:00", "end": f"{day}T{hour:02d}:30:00"}),
        ("set_reminder", {"event_id": "evt_0006", "minutes_before": 5 + i % 50}),
        ("update_event", {"event_id": "evt_0002", "title": f"Renamed {i}"}),
    ]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--calls", type=int, default=120, help="writing calls per size and mode (now)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    import pydantic_core
    from bench_runtime import big_calendar_state
    from cow_helpers import reference_call

    from envreg.canonical import canonical_json
    from envreg.env import load_environment
    from envreg.env.cow import freeze

    env = load_environment("calendar")
    print(f"writing tool on a calendar state: ms per call (p50 over {args.rounds} rounds, alternating)")
    print(f"{'state':>10} {'now ms':>9} {'previous ms':>12} {'x':>7} {'now: state size kept':>22}")
    for size in args.sizes:
        state = big_calendar_state(size)
        nbytes = len(canonical_json(state))
        instance = env.instance(state)
        reference = env.parse_state(state)
        old_calls = max(3, args.calls * 10_000 // max(size, 10_000))
        now, old = [], []
        i = 0
        for _ in range(args.rounds):
            t0 = clock()
            for _ in range(args.calls // 3):
                for tool, arguments in calls(i):
                    result = instance.call_tool(tool, arguments)
                    assert not result.is_error, result.text
                i += 1
            now.append((clock() - t0) / (args.calls // 3 * 3))
            t0 = clock()
            n = 0
            for j in range(max(1, old_calls // 3)):
                for tool, arguments in calls(10_000 + j):
                    reference, result = reference_call(env, reference, tool, arguments)
                    n += 1
            old.append((clock() - t0) / n)
        exact = instance.size == len(pydantic_core.to_json(instance.state))
        n50, o50 = statistics.median(now), statistics.median(old)
        print(f"{nbytes:>10,} {n50 * 1e3:>9.3f} {o50 * 1e3:>12.2f} {o50 / n50:>6.0f}x "
              f"{'exact' if exact else 'WRONG':>22}")  # fmt: skip
        assert instance.slow_calls == 0

    state = big_calendar_state(args.sizes[-1])
    text = canonical_json(state).encode()
    packed = gzip.compress(text, compresslevel=1, mtime=0)
    print(f"\na server taking in a {len(text) / 1e6:.2f} MB state (an upload; ms, p50 of 5)")
    steps = {
        "gunzip": lambda: gzip.decompress(packed),
        "sha256": lambda: hashlib.sha256(text).hexdigest(),
        "validate (pydantic, the model's validators)": lambda: env.state_model.model_validate_json(text),
        "validate + commit (freeze)": lambda: freeze(env.state_model.model_validate_json(text)),
        "canonical JSON + sha256 of a committed state (once per state, then cached)": lambda: env.committed(
            text
        ).sha256(),
        "gzip for the wire (level 1)": lambda: gzip.compress(text, compresslevel=1, mtime=0),
    }
    for name, step in steps.items():
        times = []
        for _ in range(5):
            t0 = clock()
            step()
            times.append(clock() - t0)
        print(f"  {name:<76} {statistics.median(times) * 1e3:8.1f}")
    print(f"  compressed: {len(packed) / 1e3:,.0f} KB ({len(packed) / len(text):.0%})")
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"{os.cpu_count()} CPUs, load average {load}")


if __name__ == "__main__":
    main()
