"""Isolation at scale: many sandboxes, half of them forks of one shared snapshot, driven concurrently
with random calls (many failing half way); each one's results and final state must equal a replay of
its own calls on a fresh local instance. Zero mismatches.

The full run is 500 sandboxes (`ENVREG_ISOLATION_SANDBOXES=500`); CI runs a smaller size.
"""

from __future__ import annotations

import os
import random

import anyio
import pytest
from conftest import REFERENCE_ENVS
from cow_helpers import random_calls

from envreg.env import load_environment
from envreg.runtime import Runtime

SANDBOXES = int(os.environ.get("ENVREG_ISOLATION_SANDBOXES", "60"))
CALLS = int(os.environ.get("ENVREG_ISOLATION_CALLS", "12"))
ENVS = ["calendar", "bank", "airline"] if "airline" in REFERENCE_ENVS else REFERENCE_ENVS[:3]


async def drive(rt: Runtime, isolation: str, n: int, seed: int) -> list[str]:
    """Lease `n` sandboxes over ENVS (every other one a fork of a snapshot that was changed first),
    run random calls in all of them at once, and return every mismatch with a local replay."""
    rng = random.Random(seed)
    plans = []
    for name in ENVS:
        env = load_environment(name)
        parent = await rt.sandbox(env if isolation == "local" else name, isolation=isolation)
        prefix = random_calls(env, rng, 6)
        for tool, arguments in prefix:
            await parent.call_tool(tool, arguments)
        snap = await parent.snapshot()
        share = n // len(ENVS)
        forks = await rt.fork(
            snap, share // 2, isolation=isolation, env=None if isolation == "local" else name
        )
        fresh = [
            await rt.sandbox(env if isolation == "local" else name, isolation=isolation)
            for _ in range(share - len(forks))
        ]
        for sb in forks:  # a fork starts from the snapshot's state, as read back from its canonical JSON
            plans.append((env, sb, snap.state, random_calls(env, rng, CALLS)))
        for sb in fresh:
            plans.append((env, sb, None, random_calls(env, rng, CALLS)))
        await parent.close()
    seen: dict[str, list[tuple[bool, str]]] = {}
    limiter = anyio.CapacityLimiter(64)

    async def run(sb, calls) -> None:
        async with limiter:
            outcomes = seen.setdefault(sb.id, [])
            for tool, arguments in calls:
                result = await sb.call_tool(tool, arguments)
                outcomes.append((result.is_error, result.text))
                await anyio.sleep(0)  # interleave the sandboxes call by call

    async with anyio.create_task_group() as tg:
        for _, sb, _, calls in plans:
            tg.start_soon(run, sb, calls)
    mismatches = []
    for env, sb, start, calls in plans:
        replay = env.instance(start)
        expected = [(r.is_error, r.text) for r in (replay.call_tool(t, a) for t, a in calls)]
        if seen[sb.id] != expected:
            mismatches.append(f"{sb.id} ({env.name}): results differ from the replay")
        if await sb.state_sha256() != replay.state.sha256():
            mismatches.append(f"{sb.id} ({env.name}): final state differs from the replay")
    return mismatches


@pytest.mark.anyio
async def test_local_sandboxes_sharing_committed_states_stay_isolated() -> None:
    async with Runtime() as rt:
        assert await drive(rt, "local", max(SANDBOXES, 150), seed=5) == []


@pytest.mark.docker
@pytest.mark.anyio
@pytest.mark.parametrize("isolation", ["instance", "container"])
async def test_docker_sandboxes_stay_isolated(reference_images, isolation) -> None:
    n = SANDBOXES if isolation == "instance" else max(len(ENVS) * 2, SANDBOXES // 10)
    async with Runtime() as rt:
        assert await drive(rt, isolation, n, seed=11) == []
