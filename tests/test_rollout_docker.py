"""The episode loop on the Docker tiers: the same results as in process, GRPO groups forked from one
snapshot, many episodes on the instance tier without cross-talk, cancellation releasing containers."""

from __future__ import annotations

import anyio
import docker
import pytest
from conftest import scaled
from rollout_helpers import catalog_tasks, rollouts, state_hash

from envreg.protocol import ISOLATION_LABEL, RUNTIME_LABEL
from envreg.rollout import EpisodeOptions

pytestmark = [pytest.mark.docker, pytest.mark.anyio]
TASKS = catalog_tasks("bank")
CHAIN = next(t for t in TASKS if t.id == "bank/pay_new_payee_chain")


@pytest.mark.parametrize("isolation", ["instance", "container"])
async def test_oracle_episodes_pass_on_the_docker_tiers(reference_images, isolation: str) -> None:
    tasks = TASKS[:3]
    async with rollouts("oracle", tasks, options=EpisodeOptions(isolation=isolation)) as runner:
        records = await runner.run([(t, 0) for t in tasks], concurrency=3)
        await runner.aclose()
        assert runner.runtime.sandboxes == {}
    for record in records:
        task = next(t for t in tasks if t.id == record.task_id)
        (env,) = record.envs
        assert record.passed and env.isolation == isolation and env.digest.startswith("sha256:")
        assert env.final_state_sha256 == state_hash(task.final_states["bank"])


async def test_grpo_group_of_eight_forks_one_snapshot_on_the_instance_tier(reference_images) -> None:
    async with rollouts("oracle", [CHAIN], options=EpisodeOptions(isolation="instance")) as runner:
        records = await runner.group(CHAIN, 8)
    assert len(records) == 8 and all(r.passed for r in records)
    assert len({r.envs[0].sandbox for r in records}) == 8, "one sandbox per rollout"
    assert len({r.envs[0].snapshot_id for r in records}) == 1 and len({r.group for r in records}) == 1
    assert {r.envs[0].final_state_sha256 for r in records} == {state_hash(CHAIN.final_states["bank"])}


@pytest.mark.slow
async def test_many_concurrent_episodes_on_the_instance_tier_without_cross_talk(reference_images) -> None:
    n = scaled(512, 48)  # 512 under scripts/test --full (CI)
    jobs = [(TASKS[i % len(TASKS)], i) for i in range(n)]
    options = EpisodeOptions(isolation="instance", score=False)
    async with rollouts("oracle", TASKS, options=options, instances_per_container=256) as runner:
        records = await runner.run(jobs, concurrency=n)
    finals = {t.id: state_hash(t.final_states["bank"]) for t in TASKS}
    assert len(records) == n and not [r.error for r in records if r.error]
    assert len({r.envs[0].sandbox for r in records}) == n
    crossed = [r.task_id for r in records if r.envs[0].final_state_sha256 != finals[r.task_id]]
    assert crossed == [], "every sandbox ended exactly where its own task's oracle ends"


def _containers_of(runtime) -> list[tuple[str, str]]:
    """(name, status) of the runtime's sandbox containers, as the engine lists them."""
    client = docker.from_env()
    try:
        found = client.containers.list(
            all=True,
            filters={"label": [f"{RUNTIME_LABEL}={runtime.id}", ISOLATION_LABEL]},
            ignore_removed=True,  # one removed between the listing and its inspection
        )
        return [(c.name, c.status) for c in found]
    finally:
        client.close()


async def test_cancelled_container_episodes_remove_their_containers(reference_images) -> None:
    tasks = TASKS[:3]
    async with rollouts(
        "oracle", tasks, latency=30.0, options=EpisodeOptions(isolation="container")
    ) as runner:
        with anyio.move_on_after(60) as scope:
            async with anyio.create_task_group() as tg:
                tg.start_soon(runner.run, [(t, 0) for t in tasks])
                while len(runner.llm.requests) < len(tasks):  # every episode is waiting on the model
                    await anyio.sleep(0.05)
                tg.cancel_scope.cancel()
        assert not scope.cancelled_caught
        assert runner.runtime.sandboxes == {} and _containers_of(runner.runtime) == []


PHASES = {
    "asked": lambda states: True,  # the episodes have asked for their sandboxes
    "created": lambda states: bool(states),  # a container of theirs exists
    "running": lambda states: "running" in states,  # one runs, its server not yet answering
}


@pytest.mark.parametrize("phase", PHASES)
async def test_episodes_cancelled_while_their_containers_start_leave_none(
    reference_images, phase: str
) -> None:
    """Cancelled at a point of the containers' start seen in the engine (not after a wall-clock delay,
    which a fast host outruns): no sandbox and no container is left. The model answers after 30 s, so no
    episode that got its sandbox ends (and gives it back) before the cancel."""
    tasks = TASKS[:3]
    options = EpisodeOptions(isolation="container")
    async with rollouts("oracle", tasks, latency=30.0, options=options) as runner:
        runtime = runner.runtime
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: runner.run([(t, 0) for t in tasks], concurrency=3))
            with anyio.fail_after(120):
                while True:
                    await anyio.sleep(0.02)
                    states = [status for _, status in await anyio.to_thread.run_sync(_containers_of, runtime)]
                    if PHASES[phase](states) or len(runtime.sandboxes) == len(tasks):
                        break
            starting = len(tasks) - len(runtime.sandboxes)  # leased only once its server answers
            tg.cancel_scope.cancel()
        assert starting > 0, f"every container was up before the cancel ({phase}: {states})"
        assert runtime.sandboxes == {} and _containers_of(runtime) == []
