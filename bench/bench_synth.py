"""Synthesis figures: tool-graph build time for the catalog, trajectories per minute per tier.

Printed, never asserted. The Docker tiers need the engine and the environment images (`envreg
build`); run under the shared lock when other work uses the engine. From the repository root:

    .venv/bin/python bench/bench_synth.py [--n 40] [--concurrency 4] [--tiers local,instance,container]

1. graph build over every manifest in manifests/: cold (a new process, a fresh embedding cache: torch
   imported, the model loaded, every parameter text embedded), stage by stage in wall and CPU seconds,
   on one torch thread (envreg's default) beside torch's default threads (one per core: the baseline,
   what builds did before); then warm (every embedding cached by content digest);
2. trajectories per minute on each tier: `Synthesizer.run(n)` with template queries, wall time from
   the first chain to the last record (sandbox forks from snapshots, calls, per-turn states).
"""

from __future__ import annotations

import argparse
import json
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


COLD = """
import json, os, sys, time
wall, cpu = time.perf_counter(), time.process_time()
stages = {}
def stage(name):
    global wall, cpu
    stages[name] = (time.perf_counter() - wall, time.process_time() - cpu)
    wall, cpu = time.perf_counter(), time.process_time()
from pathlib import Path
import torch
from envreg.synth.embed import CachedEmbedder, SentenceTransformerEmbedder
from envreg.synth.graph import build_graph, load_manifests
stage("import")
threads = int(sys.argv[3]) or torch.get_num_threads()
inner = SentenceTransformerEmbedder(threads=threads)
inner.encode(["warm up"])
stage("model load")
embedder = CachedEmbedder(inner, Path(sys.argv[1]))
graph = build_graph(load_manifests(sys.argv[2]), embedder)
stages["embedding"] = (graph.timings["embedding"], None)
stages["pairs and edges"] = (graph.timings["edges"], None)
stage("build")
print(json.dumps({"threads": threads, "texts": embedder.computed, "stages": stages}))
"""


def cold_build(cache: Path, manifests: Path, threads: int) -> dict:
    """Stage timings of a cold build in a fresh process; `threads` 0: torch's default (one per core)."""
    proc = subprocess.run(
        [sys.executable, "-c", COLD, str(cache), str(manifests), str(threads)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return json.loads(proc.stdout.splitlines()[-1])


def graph_build(cache: Path, manifests: Path) -> tuple[float, object]:
    """(warm seconds, graph), in this process, with the embeddings a cold build cached."""
    from envreg.synth.embed import make_embedder
    from envreg.synth.graph import build_graph, load_manifests

    started = time.perf_counter()
    graph = build_graph(load_manifests(manifests), make_embedder(cache_dir=cache))
    return time.perf_counter() - started, graph


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
    runs = []
    for threads in (1, 0):
        with tempfile.TemporaryDirectory() as tmp:
            runs.append(cold_build(Path(tmp), args.manifests, threads))
            if threads == 1:
                warm, graph = graph_build(Path(tmp), args.manifests)
    stats = graph.stats()
    print(
        f"catalog: {stats['environments']} environments, {stats['tools']} tools, {stats['inputs']} inputs, "
        f"{stats['outputs']} outputs, {runs[0]['texts']} texts embedded; load average "
        f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    )
    one, base = runs
    print(f"| cold graph build, stage | 1 thread (envreg) | {base['threads']} threads (baseline) | ratio |")
    print("| --- | --- | --- | --- |")
    for name in one["stages"]:
        a, b = one["stages"][name][0], base["stages"][name][0]
        print(f"| {name}, wall s | {a:.1f} | {b:.1f} | {b / a if a else 0:.2f}x |")
    total = [
        sum(v[0] for k, v in r["stages"].items() if k in ("import", "model load", "build")) for r in runs
    ]
    cpu = [sum(v[1] for k, v in r["stages"].items() if v[1] is not None) for r in runs]
    print(f"| total, wall s | {total[0]:.1f} | {total[1]:.1f} | {total[1] / total[0]:.2f}x |")
    print(f"| total, CPU s | {cpu[0]:.1f} | {cpu[1]:.1f} | {cpu[1] / cpu[0]:.2f}x |")
    print(f"| warm build (embeddings cached), wall s | {warm:.2f} | | |")
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
