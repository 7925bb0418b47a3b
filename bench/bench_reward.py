"""Reward figures: evaluations per second for a 10-call episode on each tier, and the reward server under load.

Figures are printed, never asserted. The Docker tiers need the engine and the environment images
(`envreg build calendar`). Run from the repository root:

    .venv/bin/python bench/bench_reward.py [--seconds 5] [--no-docker] [--requests 2000]

Sections:
  1. one evaluation = parse the model output (10 ``<tool_call>`` tags), reset a reused sandbox to the
     record's initial state, replay the 10 calls, compare the final state (canonical sha256) and
     match the trace. Episodes: the counter fixture (the smallest state: what the reward machinery
     itself costs), calendar `busy_monday_small_state` and bank `daily_limit_raise_and_own_transfers`
     (first 10 calls, real catalog states). Local tier: sequential in one process. Instance and
     container tiers: 8 evaluations at once, sandboxes from warm pools.
  2. `envreg reward serve` (local tier, a subprocess) with 64 concurrent client connections, each
     POSTing one item per request (and a run with 8 items per request); requests/s, evaluations/s,
     latency p50 / p99. The client runs in this process on the same 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import httpx2

ROOT = Path(__file__).resolve().parents[1]
COUNTER = str(ROOT / "tests" / "fixtures" / "counter")
os.environ.setdefault("ENVREG_IMAGES", str(ROOT / "images"))


def episode(env_name: str, scenario: str | None, n: int = 10) -> tuple[dict[str, Any], str]:
    """A record of the first `n` calls of a scenario, executed locally, and the model text that replays it."""
    from envreg.env import load_environment, load_scenarios

    env = load_environment(env_name)
    steps = [
        (s.tool, s.arguments)
        for s in next(x for x in load_scenarios(env.folder)[0] if x.name == scenario).steps
    ][:n]
    scenario_state = next(x for x in load_scenarios(env.folder)[0] if x.name == scenario).initial_state
    initial = scenario_state or env.initial_state().to_json()
    return _record(env, initial, steps)


def counter_episode() -> tuple[dict[str, Any], str]:
    from envreg.env import load_environment

    env = load_environment(COUNTER)
    steps = [("increment", {"by": i + 1}) for i in range(9)] + [("get", {})]
    return _record(env, env.initial_state().to_json(), steps)


def _record(
    env: Any, initial: dict[str, Any], steps: list[tuple[str, dict[str, Any]]]
) -> tuple[dict[str, Any], str]:
    instance = env.instance(initial)
    calls = []
    for tool, arguments in steps:
        result = instance.call_tool(tool, arguments)
        calls.append({"env": env.name, "tool": tool, "arguments": arguments, "is_error": result.is_error})
    record = {
        "id": env.name,
        "envs": [env.name],
        "calls": calls,
        "initial_states": {env.name: initial},
        "final_states": {env.name: instance.state.to_json()},
    }
    text = "".join(f"<tool_call>{json.dumps({'name': t, 'arguments': a})}</tool_call>" for t, a in steps)
    return record, text


async def evaluations_per_second(
    isolation: str, record: dict, text: str, seconds: float, concurrency: int
) -> float:
    from envreg.reward.score import Scorer
    from envreg.runtime import Runtime

    truth = json.dumps(record)  # as a trainer sends it: JSON text, parsed once and cached
    async with Runtime(pool={isolation: concurrency} if isolation != "local" else None) as rt:
        scorer = Scorer(rt, isolation=isolation, sources={"counter": COUNTER})
        first = await scorer.score(truth, text)
        assert first.reward == 1.0, first
        for _ in range(concurrency * 2):  # warm: sandboxes created, tool lists fetched
            await scorer.score(truth, text)
        done = 0
        deadline = time.perf_counter() + seconds

        async def worker() -> None:
            nonlocal done
            while time.perf_counter() < deadline:
                await scorer.score(truth, text)
                done += 1

        started = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for _ in range(concurrency):
                tg.start_soon(worker)
        elapsed = time.perf_counter() - started
        await scorer.close()
    return done / elapsed


def section_tiers(seconds: float, docker: bool) -> list[tuple[str, str, float]]:
    rows = []
    episodes = {
        "counter (10 calls)": counter_episode(),
        "calendar busy_monday_small_state (10 calls)": episode("calendar", "busy_monday_small_state"),
        "bank daily_limit_raise_and_own_transfers (10 calls, seed-sized state)": episode(
            "bank", "daily_limit_raise_and_own_transfers"
        ),
    }
    for name, (record, text) in episodes.items():
        rate = anyio.run(evaluations_per_second, "local", record, text, seconds, 1)
        rows.append((name, "local", rate))
        print(f"  {name:<72} local      {rate:>9,.0f} evaluations/s", flush=True)
    if docker:
        record, text = episodes["calendar busy_monday_small_state (10 calls)"]
        for isolation in ("instance", "container"):
            rate = anyio.run(evaluations_per_second, isolation, record, text, seconds, 8)
            rows.append(("calendar busy_monday_small_state (10 calls)", isolation, rate))
            print(
                f"  {'calendar busy_monday_small_state (10 calls)':<72} {isolation:<10} {rate:>9,.0f} evaluations/s",
                flush=True,
            )
    return rows


def start_server() -> tuple[subprocess.Popen[str], str]:
    env = {**os.environ, "ENVREG_REWARD_TOKEN": "bench"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "envreg.cli.main", "reward", "serve", "--port", "0", "--concurrency", "64",
         "--env", f"counter={COUNTER}"],
        cwd=ROOT, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    while True:
        line = proc.stderr.readline()
        if match := re.search(r"(http://127\.0\.0\.1:\d+)", line):
            return proc, match.group(1)
        if not line and proc.poll() is not None:
            raise SystemExit("the reward server did not start")


async def load(url: str, items: list[dict[str, Any]], requests: int, connections: int) -> dict[str, float]:
    latencies: list[float] = []
    sent = 0
    limits = httpx2.Limits(max_connections=connections, max_keepalive_connections=connections)
    async with httpx2.AsyncClient(
        headers={"authorization": "Bearer bench"}, timeout=120, limits=limits
    ) as client:

        async def worker() -> None:
            nonlocal sent
            while sent < requests:
                sent += 1
                t = time.perf_counter()
                response = await client.post(f"{url}/v1/score", json={"items": items})
                latencies.append(time.perf_counter() - t)
                assert response.status_code == 200, response.text
                assert all(r.get("result", {}).get("reward") == 1.0 for r in response.json()["results"])

        started = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for _ in range(connections):
                tg.start_soon(worker)
        elapsed = time.perf_counter() - started
    latencies.sort()
    return {
        "requests_per_s": len(latencies) / elapsed,
        "evaluations_per_s": len(latencies) * len(items) / elapsed,
        "p50_ms": statistics.median(latencies) * 1e3,
        "p99_ms": latencies[int(0.99 * (len(latencies) - 1))] * 1e3,
    }


def section_server(requests: int) -> list[tuple[str, dict[str, float]]]:
    proc, url = start_server()
    rows = []
    try:
        for name, (record, text) in {
            "counter (10 calls)": counter_episode(),
            "calendar busy_monday_small_state (10 calls)": episode("calendar", "busy_monday_small_state"),
        }.items():
            item = {"record": json.dumps(record), "output": text}
            anyio.run(load, url, [item], 200, 64)  # warm
            for batch in (1, 8):
                figures = anyio.run(load, url, [item] * batch, max(64, requests // batch), 64)
                rows.append((f"{name}, {batch} item(s)/request", figures))
                print(
                    f"  {name + f', {batch} item(s)/request':<60} {figures['requests_per_s']:>7,.0f} req/s "
                    f"{figures['evaluations_per_s']:>7,.0f} eval/s  p50 {figures['p50_ms']:.1f} ms  p99 {figures['p99_ms']:.1f} ms",
                    flush=True,
                )
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=5.0, help="timing window per tier and episode")
    parser.add_argument("--requests", type=int, default=2000, help="requests per server run")
    parser.add_argument("--no-docker", action="store_true", help="local tier only")
    args = parser.parse_args()
    print(f"reward evaluations per second ({os.cpu_count()} cores)")
    section_tiers(args.seconds, not args.no_docker)
    print("reward server, local tier, 64 concurrent connections")
    section_server(args.requests)


if __name__ == "__main__":
    main()
