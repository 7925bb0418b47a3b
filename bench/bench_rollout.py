"""Rollout figures: episodes/s and envreg's own time per step, GRPO groups ready from a snapshot, many
concurrent episodes on the instance tier. Printed, never asserted.

The policy is the scripted stand-in (`python -m envreg.standin --script oracle`, zero latency) in its
own process, so every figure is envreg's work plus one loopback HTTP round trip per assistant step.
The Docker tiers need the engine and the images (`envreg build calendar bank`). From the repository root:

    .venv/bin/python bench/bench_rollout.py [--episodes 104] [--concurrency 16] [--many 512] [--no-docker] [--save bench/figures/rollout.md]

Sections:
  1. per tier (local, instance, container): the catalog scenarios of calendar and bank played by the
     oracle script, `--concurrency` at once, not scored; episodes/s, and per step (one assistant message
     and the calls it makes) envreg's own time p50 / p95 (the step's time outside the policy: tool calls
     over MCP, the state hash after each user turn, the loop) beside the baseline: the same calls made
     straight on a `Sandbox` (`sb.call_tool`, no loop, no policy) at the same concurrency, per step; what
     envreg adds is the difference of the p50s. One episode at a time, then `--concurrency` at once
     (where calls to one shared server queue behind each other's, in both columns).
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


SAVED: list[str] = []
"""The Markdown `--save` writes: every line printed, as the tables the README shows."""


def emit(line: str) -> None:
    print(line, flush=True)
    SAVED.append(line)


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


async def direct_step_seconds(rt, jobs, isolation: str, concurrency: int) -> list[float]:
    """The baseline: each job's oracle calls straight on a sandbox (`sb.call_tool`, no loop, no policy),
    `concurrency` jobs at once as the episodes ran, timed per step as the oracle plays them."""
    from envreg.rollout.session import Session

    per_step: list[float] = []
    limit = anyio.Semaphore(concurrency)

    async def play(task) -> None:
        async with limit, await Session.open(rt, task, isolation=isolation) as session:
            sb = session.sandboxes[task.envs[0]]
            for call in task.turns[0].calls:
                start = time.perf_counter()
                await sb.call_tool(call.tool, call.arguments)
                per_step.append(time.perf_counter() - start)

    async with anyio.create_task_group() as tg:
        for task, _ in jobs:
            tg.start_soon(play, task)
    return per_step


async def section_tiers(url: str, tasks, tiers: list[str], episodes: int, concurrency: int) -> None:
    from envreg.rollout import ChatPolicy, EpisodeOptions, Rollouts
    from envreg.runtime import Runtime

    emit(
        f"{episodes} episodes per tier ({len(tasks)} scenarios of calendar and bank), oracle stand-in: one at a time,"
        f" then {concurrency} at once, beside the same calls made directly (`sb.call_tool`) at the same concurrency\n"
    )
    emit(
        "| tier | at once | episodes/s | envreg per step p50 / p95 | of which tool calls p50 | direct `sb.call_tool`"
        " p50 | envreg adds (p50) | errors |\n| --- | --- | --- | --- | --- | --- | --- | --- |"
    )
    jobs = [(tasks[i % len(tasks)], i) for i in range(episodes)]
    for isolation in tiers:
        for at_once in dict.fromkeys((1, concurrency)):
            policy = ChatPolicy(url, "standin")
            pool = None if isolation == "local" else {isolation: at_once}
            async with Runtime(pool=pool) as rt:
                runner = Rollouts(rt, policy, EpisodeOptions(isolation=isolation, score=False))
                await runner.run(jobs[:at_once], concurrency=at_once)  # warm: pools, connections, caches
                start = time.perf_counter()
                records = await runner.run(jobs, concurrency=at_once)
                wall = time.perf_counter() - start
                baseline = await direct_step_seconds(rt, jobs, isolation, at_once)
            await policy.aclose()
            steps = [t.envreg_seconds / t.steps for r in records for t in r.turns if t.steps]
            tools = [sum(c.seconds for c in t.calls) / t.steps for r in records for t in r.turns if t.steps]
            errors = sum(1 for r in records if r.error)
            p50, base = pct(steps, 0.5), pct(baseline, 0.5)
            emit(
                f"| {isolation} | {at_once} | {len(records) / wall:.1f} | {p50 * 1e3:.2f} / {pct(steps, 0.95) * 1e3:.2f} ms"
                f" | {pct(tools, 0.5) * 1e3:.2f} ms | {base * 1e3:.2f} ms | {(p50 - base) * 1e3:.2f} ms ({p50 / base:.2f}x)"
                f" | {errors} |"
            )


async def section_groups(tasks, tiers: list[str], repeats: int = 8) -> None:
    from envreg.rollout.session import Session, initial_snapshot
    from envreg.runtime import Runtime

    task = next(t for t in tasks if t.id == "bank/pay_new_payee_chain")
    emit(
        f"\nA GRPO group of 8 from one snapshot (`Session.group`, {task.id}), median of {repeats}:\n\n"
        "| tier | warm pool holding the snapshot | cold (no pool) | cold / warm |\n| --- | --- | --- | --- |"
    )
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
        c = statistics.median(cold)
        if not warm:  # the local tier keeps no pool: every group is made in process
            emit(f"| {isolation} | (no pool on this tier) | {c * 1e3:.1f} ms | |")
            continue
        w = statistics.median(warm)
        emit(f"| {isolation} | {w * 1e3:.1f} ms | {c * 1e3:.1f} ms | {c / w:.1f}x |")


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
    emit(
        f"\n{n} episodes at once on the instance tier: {wall:.1f} s, {n / wall:.1f} episodes/s, {calls} calls,"
        f" cross-talk {crossed}, errors {errors}"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--episodes", type=int, default=104)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--many", type=int, default=512)
    parser.add_argument("--no-docker", action="store_true")
    parser.add_argument(
        "--save", type=Path, help="write the tables here (bench/figures/rollout.md for the README)"
    )
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
    if args.save:
        shown = [a for i, a in enumerate(sys.argv[1:]) if "--save" not in (a, sys.argv[i])]
        load = os.getloadavg()[0]
        SAVED.append(
            f"\n`bench/bench_rollout.py {' '.join(shown)}`; load average {load:.1f} at the end (2 cores)."
        )
        args.save.parent.mkdir(parents=True, exist_ok=True)
        args.save.write_text("\n".join(SAVED) + "\n")


if __name__ == "__main__":
    main()
