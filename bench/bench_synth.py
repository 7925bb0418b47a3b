"""Synthesis figures: tool-graph build time for the catalog, trajectories per minute per tier.

Printed, never asserted. The Docker tiers need the engine and the environment images (`envreg
build`); run under the shared lock when other work uses the engine. From the repository root:

    .venv/bin/python bench/bench_synth.py [--n 40] [--concurrency 4] [--tiers local,instance,container]

1. graph build over every manifest in manifests/: cold (a fresh embedding cache: the model is loaded
   and every parameter text embedded) and warm (every embedding cached by content digest);
2. trajectories per minute on each tier: `Synthesizer.run(n)` with template queries, wall time from
   the first chain to the last record (sandbox forks from snapshots, calls, per-turn states).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("ENVREG_IMAGES", str(ROOT / "images"))


def graph_build(cache: Path, manifests: Path) -> tuple[float, float, object]:
    """(cold seconds in a fresh process, warm seconds, graph): cold includes importing torch and the model."""
    code = (
        "import time; t=time.perf_counter();"
        "from envreg.synth.graph import build_graph, load_manifests;"
        "from envreg.synth.embed import make_embedder;"
        f"build_graph(load_manifests({str(manifests)!r}), make_embedder(cache_dir=__import__('pathlib').Path({str(cache)!r})));"
        "print(time.perf_counter()-t)"
    )
    cold = float(
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        ).stdout.split()[-1]
    )
    from envreg.synth.embed import make_embedder
    from envreg.synth.graph import build_graph, load_manifests

    started = time.perf_counter()
    graph = build_graph(load_manifests(manifests), make_embedder(cache_dir=cache))
    return cold, time.perf_counter() - started, graph


async def per_minute(graph, tier: str, n: int, concurrency: int) -> tuple[float, int, int, float]:
    from envreg.runtime import Runtime
    from envreg.synth.execute import Synthesizer

    pool = {tier: concurrency * 2} if tier != "local" else None
    async with Runtime(pool=pool) as rt:
        synth = Synthesizer(rt, graph, isolation=tier, seed=1)
        if tier != "local":  # warm the pools and the snapshots before timing
            for env in graph.envs():
                await rt.warm(env, tier, concurrency * 2)
                await synth.context(env)
        started = time.perf_counter()
        result = await synth.run(n, concurrency=concurrency)
        seconds = time.perf_counter() - started
    calls = sum(len(t.calls) for t in result.trajectories)
    return len(result.trajectories) / seconds * 60, calls, result.attempted, seconds


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=40)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument(
        "--tiers", default="local,instance,container", help="Comma-separated; empty for the graph only."
    )
    parser.add_argument("--manifests", type=Path, default=ROOT / "manifests")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cold, warm, graph = graph_build(Path(tmp), args.manifests)
    stats = graph.stats()
    print(
        f"catalog: {stats['environments']} environments, {stats['tools']} tools, {stats['inputs']} inputs, {stats['outputs']} outputs"
    )
    print("| what | seconds |")
    print("| --- | --- |")
    print(f"| graph build, cold (new process: import torch, load the model, embed every text) | {cold:.1f} |")
    print(f"| graph build, warm (embeddings cached by content digest) | {warm:.2f} |")
    print()
    print(
        f"| tier | trajectories / minute | calls | chains tried | seconds ({args.n} trajectories, {args.concurrency} at once) |"
    )
    print("| --- | --- | --- | --- | --- |")
    for tier in filter(None, args.tiers.split(",")):
        rate, calls, attempted, seconds = anyio.run(per_minute, graph, tier, args.n, args.concurrency)
        print(f"| {tier} | {rate:,.0f} | {calls} | {attempted} | {seconds:.1f} |")


if __name__ == "__main__":
    main()
