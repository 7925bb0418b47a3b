"""EnvGen over the 20 inputs of tests/fixtures/envgen (EnvFactory metadata, OpenAPI documents, briefs), with the
stand-in model: revisions per environment, wall time per revision (by stage), and the share of generated
environments that pass `envreg validate`; beside it, the baseline of a loop that never executes its revisions
(EnvFactory's released EnvGen), which keeps every first draft.

The stand-in writes a defect schedule per input (`SCHEDULES`, in turn): none, one or two defects that a
report naming them gets fixed, and one schedule as long as the budget, which cannot pass. So the figures
describe the loop (sandbox inspection, image builds, validation), not a model: with a served model, run
`envreg envgen FILE --llm-base-url URL --model M` on the same inputs and read each run's envgen.json.

    python bench/bench_envgen.py [--revisions 4] [--out DIR] [--keep-images] [INPUTS...]

Needs the engine, the base image (`envreg build` of any environment) and npm (the TypeScript validators).
Images are built under ENVREG_IMAGE_PREFIX as bench-<name> and removed at the end unless --keep-images.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parent.parent
INPUTS = ROOT / "tests" / "fixtures" / "envgen"
SCHEDULES = (
    [],
    ["syntax"],
    ["hang"],
    ["schema", "scenario"],
    ["uuid"],
    ["journal"],
    [],
    ["syntax", "uuid", "journal", "scenario"],  # as long as a budget of 4: never passes
)


async def one(path: Path, schedule: list[str], revisions: int, out: Path) -> dict:
    from envreg.envgen.loop import Options, generate, prepare_output, write_metadata
    from envreg.envgen.spec import Brief, read_input
    from envreg.standin import StandInLLM
    from envreg.standin.envgen import EnvGenScript
    from envreg.synth.llm import LLMConfig

    with StandInLLM(EnvGenScript(schedule), keep_requests=False) as served:
        llm = LLMConfig(served.base_url, "standin")
        spec = read_input(path)
        if isinstance(spec, Brief):
            spec = await write_metadata(llm, spec)
        spec = spec.model_copy(update={"name": f"bench-{spec.name}"[:63]})
        folder = out / spec.name
        prepare_output(folder, spec.name, force=True)
        t0 = time.perf_counter()
        result = await generate(spec, llm, Options(out=folder, revisions=revisions))
        wall = time.perf_counter() - t0
    return {"input": path.name, "name": spec.name, "schedule": schedule, "wall": wall, **result.to_json()}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "inputs", nargs="*", type=Path, help="inputs (default: every file of tests/fixtures/envgen)"
    )
    parser.add_argument("--revisions", type=int, default=4, help="revision budget (default 4)")
    parser.add_argument("--out", type=Path, help="output folder (default: a new temporary one)")
    parser.add_argument("--keep-images", action="store_true", help="keep the images built")
    args = parser.parse_args()
    inputs = args.inputs or sorted(INPUTS.iterdir())
    out = args.out or Path(tempfile.mkdtemp(prefix="envgen-bench-"))
    runs = []
    try:
        for i, path in enumerate(inputs):
            schedule = SCHEDULES[i % len(SCHEDULES)]
            run = anyio.run(one, path, list(schedule), args.revisions, out)
            runs.append(run)
            revs = run["revisions"]
            print(
                f"{run['input']:28} {','.join(schedule) or '-':30} revisions {len(revs)}  "
                f"{'passed' if run['passed'] else 'FAILED'}  {run['wall']:6.1f} s",
                flush=True,
            )
    finally:
        if not args.keep_images:
            names = [r["name"] for r in runs]
            for name in names:
                ids = subprocess.run(
                    ["docker", "images", "-q", "--filter", f"label=io.envreg.name={name}"],
                    capture_output=True,
                    text=True,
                ).stdout.split()
                if ids:
                    subprocess.run(["docker", "image", "rm", "-f", *sorted(set(ids))], capture_output=True)
    report(runs, args.revisions, out)


def report(runs: list[dict], budget: int, out: Path) -> None:
    revisions = [r for run in runs for r in run["revisions"]]
    counts = [len(run["revisions"]) for run in runs]
    passed = [run for run in runs if run["passed"]]
    first = sum(run["revisions"][0]["passed"] for run in runs)
    stages = ("llm", "inspect", "build", "validate")

    def mean(key: str, rows: list[dict]) -> float:
        values = [r["seconds"].get(key, 0.0) for r in rows]
        return statistics.fmean(values) if values else 0.0

    built = [r for r in revisions if r["built"]]
    print(f"\n{len(runs)} inputs, revision budget {budget} (stand-in model; output under {out})")
    print(f"{'':34} {'executed (envreg envgen)':>26} {'unexecuted loop (baseline)':>28}")
    print(f"{'first drafts kept':34} {first:>20}/{len(runs):<5} {len(runs):>22}/{len(runs):<5}")
    print(
        f"{'environments passing validation':34} {len(passed):>20}/{len(runs):<5} {first:>22}/{len(runs):<5}"
        f"  ({100 * len(passed) / len(runs):.0f}% vs {100 * first / len(runs):.0f}%)"
    )
    print(
        f"revisions per environment: mean {statistics.fmean(counts):.2f}, median {statistics.median(counts):g}, "
        f"max {max(counts)}; {len(revisions)} revisions, {len(built)} built into images"
    )
    print(
        f"wall time per revision: mean {mean('total', revisions):.1f} s, median "
        f"{statistics.median(r['seconds']['total'] for r in revisions):.1f} s; "
        + ", ".join(f"{s} {mean(s, revisions):.1f} s" for s in stages)
    )
    if built:
        print(
            "per built revision: "
            + ", ".join(f"{s} {mean(s, built):.1f} s" for s in stages)
            + f", total {mean('total', built):.1f} s"
        )
    caught: dict[str, int] = {}
    for r in revisions:
        for check in r["failed_checks"]:
            caught[check] = caught.get(check, 0) + 1
    print("failing checks over all revisions: " + ", ".join(f"{k} {v}" for k, v in sorted(caught.items())))
    (out / "bench.json").write_text(json.dumps(runs, indent=1) + "\n")


if __name__ == "__main__":
    sys.exit(main())
