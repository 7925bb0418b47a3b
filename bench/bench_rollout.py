"""Rollout figures: episodes/s and envreg's own time per step, GRPO groups ready from a snapshot, many
concurrent episodes on the instance tier. Printed, never asserted.

The policy is the scripted stand-in (`python -m envreg.standin --script oracle`, zero latency) in its
own process, so every figure is envreg's work plus one loopback HTTP round trip per assistant step.
The Docker tiers need the engine and the images (`envreg build calendar bank`). From the repository root:

    .venv/bin/python bench/bench_rollout.py [--episodes 104] [--concurrency 16] [--many 512] [--no-docker]

Sections:
  1. per tier (local, instance, container): the catalog scenarios of calendar and bank played by the
     oracle script, `--concurrency` at once, not scored; episodes/s, and per step (one assistant message
     and the calls it makes) envreg's own time p50 / p95 (the step's time outside the policy: tool calls
     over MCP, the state hash after each user turn, the loop) beside the baseline: the same calls made
     straight on a `Sandbox` (`sb.call_tool`, no loop, no policy), per step, as a ratio.
  2. a GRPO group of 8 forked from one snapshot (`Session.group`): ready from a warm pool whose servers
     hold the snapshot, against the same group from no pool (cold), per tier.
  3. `--many` episodes at once on the instance tier (one shared container per 256): wall time,
     episodes/s, and cross-talk: episodes whose live final state hash is not their own task's oracle's.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("ENVREG_IMAGES", str(ROOT / "images"))


def standin(envs: list[str]) -> tuple[subprocess.Popen[str], str]:
    args = [sys.executable, "-m", "envreg.standin", "--script", "oracle", "--port", "0"]
    for env in envs:
        args += ["--env", env]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    line = proc.stdout.readline()
    return proc, line.rsplit(" ", 1)[1].strip()


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


async def direct_step_seconds(rt, tasks, isolation: str) -> list[float]:
    """The baseline: each task's oracle calls straight on a sandbox, grouped per step as the oracle plays them."""
    from envreg.rollout.session import Session

    per_step = []
    for task in tasks:
        async with await Session.open(rt, task, isolation=isolation) as session:
            sb = session.sandboxes[task.envs[0]]
            for call in task.turns[0].calls:
                start = time.perf_counter()
                await sb.call_tool(call.tool, call.arguments)
                per_step.append(time.perf_counter() - start)
    return per_step


async def section_tiers(url: str, tasks, tiers: list[str], episodes: int, concurrency: int) -> None:
    from envreg.rollout import ChatPolicy, EpisodeOptions, Rollouts
    from envreg.runtime import Runtime

    print(
        f"1. {episodes} episodes per tier ({len(tasks)} scenarios of calendar+bank), {concurrency} at once, oracle stand-in"
    )
    jobs = [(tasks[i % len(tasks)], i) for i in range(episodes)]
    for isolation in tiers:
        policy = ChatPolicy(url, "standin")
        pool = None if isolation == "local" else {isolation: concurrency}
        async with Runtime(pool=pool) as rt:
            runner = Rollouts(rt, policy, EpisodeOptions(isolation=isolation, score=False))
            await runner.run(jobs[:concurrency], concurrency=concurrency)  # warm: pools, connections, caches
            start = time.perf_counter()
            records = await runner.run(jobs, concurrency=concurrency)
            wall = time.perf_counter() - start
            baseline = await direct_step_seconds(rt, tasks, isolation)
        await policy.aclose()
        steps = [t.envreg_seconds / t.steps for r in records for t in r.turns if t.steps]
        tools = [sum(c.seconds for c in t.calls) / t.steps for r in records for t in r.turns if t.steps]
        errors = sum(1 for r in records if r.error)
        p50, base = pct(steps, 0.5), pct(baseline, 0.5)
        print(
            f"  {isolation:<9} {len(records) / wall:7.1f} episodes/s  envreg per step p50 {p50 * 1e3:6.2f} ms"
            f" p95 {pct(steps, 0.95) * 1e3:6.2f} ms (tool calls {pct(tools, 0.5) * 1e3:5.2f} ms)"
            f" | direct sb.call_tool p50 {base * 1e3:5.2f} ms | ratio {p50 / base:5.2f}x | errors {errors}",
            flush=True,
        )


async def section_groups(tasks, tiers: list[str], repeats: int = 8) -> None:
    from envreg.rollout.session import Session, initial_snapshot
    from envreg.runtime import Runtime

    task = next(t for t in tasks if t.id == "bank/pay_new_payee_chain")
    print(f"2. a GRPO group of 8 from one snapshot ({task.id}), median of {repeats}")
    for isolation in [t for t in tiers if t != "local"] + (["local"] if "local" in tiers else []):
        async with Runtime() as rt:
            cold = []
            for _ in range(2 if isolation == "container" else repeats):
                start = time.perf_counter()
                sessions = await Session.group(rt, task, 8, isolation=isolation)
                cold.append(time.perf_counter() - start)
                for s in sessions:
                    await s.close()
            warm = []
            if isolation != "local":
                snap = await initial_snapshot(rt, task, "bank", isolation)
                for _ in range(repeats):
                    await rt.warm(
                        "bank", isolation, 8, snapshot=snap
                    )  # the pool holds 8, each server the snapshot
                    start = time.perf_counter()
                    sessions = await Session.group(rt, task, 8, isolation=isolation)
                    warm.append(time.perf_counter() - start)
                    for s in sessions:
                        await s.close()
        w = statistics.median(warm) if warm else float("nan")
        c = statistics.median(cold)
        print(
            f"  {isolation:<9} warm pool holding the snapshot {w * 1e3:7.1f} ms | cold (no pool) {c * 1e3:7.1f} ms"
            f" | cold/warm {c / w if warm else float('nan'):5.1f}x",
            flush=True,
        )


async def section_many(url: str, tasks, n: int) -> None:
    from envreg.canonical import canonical_json, sha256_hex
    from envreg.rollout import ChatPolicy, EpisodeOptions, Rollouts
    from envreg.runtime import Runtime

    bank = [t for t in tasks if t.envs == ["bank"]]
    finals = {t.id: sha256_hex(canonical_json(t.final_states["bank"])) for t in bank}
    jobs = [(bank[i % len(bank)], i) for i in range(n)]
    policy = ChatPolicy(url, "standin")
    async with Runtime(instances_per_container=256) as rt:
        runner = Rollouts(rt, policy, EpisodeOptions(isolation="instance", score=False))
        start = time.perf_counter()
        records = await runner.run(jobs, concurrency=n)
        wall = time.perf_counter() - start
    await policy.aclose()
    crossed = sum(1 for r in records if r.envs[0].final_state_sha256 != finals[r.task_id])
    errors = sum(1 for r in records if r.error)
    calls = sum(len(t.calls) for r in records for t in r.turns)
    print(
        f"3. {n} episodes at once on the instance tier: {wall:.1f} s, {n / wall:.1f} episodes/s, {calls} calls,"
        f" cross-talk {crossed}, errors {errors}",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--episodes", type=int, default=104)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--many", type=int, default=512)
    parser.add_argument("--no-docker", action="store_true")
    args = parser.parse_args()
    from envreg.rollout import scenario_tasks

    tasks = scenario_tasks(["calendar", "bank"])
    tiers = ["local"] if args.no_docker else ["local", "instance", "container"]
    proc, url = standin(["calendar", "bank"])
    try:
        anyio.run(section_tiers, url, tasks, tiers, args.episodes, args.concurrency)
        anyio.run(section_groups, tasks, tiers)
        if not args.no_docker and args.many:
            anyio.run(section_many, url, tasks, args.many)
    finally:
        proc.terminate()
        proc.wait()


if __name__ == "__main__":
    main()
