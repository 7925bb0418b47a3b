"""The Ray backend on a real multi-node Ray cluster on this machine (its nodes share this machine's engine).

Every address is loopback: the nodes, the driver and the node proxies use 127.0.0.1. Nodes declare how
many servers they host with the `envreg_servers` resource (1, 2 and 3 here), so placement by free
capacity is visible in the counts.
"""

from __future__ import annotations

import os

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # Ray then resolves this node to 127.0.0.1
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import importlib.util
import json
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import docker
import httpx2
import pytest
from mcp_helpers import ERAS, mcp_client

from envreg.env import load_environment, load_scenarios
from envreg.env.scenario import CallOutcome, run_steps
from envreg.errors import LimitReached
from envreg.protocol import RUNTIME_LABEL
from envreg.runtime import Runtime, SandboxGone
from envreg.runtime.backends.docker_keeper import Liveness
from envreg.runtime.backends.ray import NODE_RESOURCE, RayBackend
from envreg.runtime.backends.ray_node import sweep_runtimes

if TYPE_CHECKING:  # importing ray takes seconds: the fixture does it
    from ray.cluster_utils import Cluster

pytestmark = [
    pytest.mark.docker,
    pytest.mark.anyio,
    pytest.mark.xdist_group("ray"),  # one worker: Ray clusters of two workers on one host see each other
    pytest.mark.skipif(
        importlib.util.find_spec("ray") is None,
        reason="the Ray backend needs the `ray` extra: pip install -e '.[ray]' (scripts/bootstrap does)",
    ),
]


def node_args(servers: int) -> dict:
    return {"num_cpus": 1, "object_store_memory": 80 << 20, "resources": {NODE_RESOURCE: servers}}


@pytest.fixture(scope="module")
def cluster(reference_images) -> Iterator[Cluster]:
    """A head and two workers hosting 1, 2 and 3 servers."""
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={**node_args(1), "include_dashboard": False})
    cluster.add_node(**node_args(2))
    cluster.add_node(**node_args(3))
    cluster.wait_for_nodes()
    yield cluster
    cluster.shutdown()


def ray_runtime(cluster: Cluster, **options) -> Runtime:
    return Runtime(backend="ray", address=cluster.address, **options)


def node_of(rt: Runtime, sandbox) -> str:
    backend = rt.backend
    assert isinstance(backend, RayBackend)
    return backend.node_of(sandbox.server).id


def leftovers(runtime_ids: list[str]) -> list[str]:
    """Containers, networks, agent-socket folders and firewall rules of these engine runtimes that still exist."""
    client = docker.from_env()
    left = []
    for runtime_id in runtime_ids:
        label = {"label": f"{RUNTIME_LABEL}={runtime_id}"}
        left += [c.name for c in client.containers.list(all=True, filters=label)]
        left += [n.name for n in client.networks.list(filters=label)]
        left += [str(p) for p in [Path(f"/dev/shm/envreg-0/{runtime_id}")] if p.exists()]
    rules = subprocess.run(["iptables", "-w", "-S", "INPUT"], capture_output=True, text=True).stdout
    left += [line for line in rules.splitlines() if any(f"envreg-{r}" in line for r in runtime_ids)]
    return left


async def test_sandboxes_fill_the_nodes_by_free_capacity(cluster) -> None:
    async with ray_runtime(cluster) as rt:
        sandboxes = []

        async def lease() -> None:
            sandboxes.append(await rt.sandbox("calendar", isolation="container"))

        async with anyio.create_task_group() as tg:
            for _ in range(6):
                tg.start_soon(lease)
        backend = rt.backend
        capacity = {node.id: node.capacity for node in backend.nodes.values()}
        assert sorted(capacity.values()) == [1, 2, 3]
        assert Counter(node_of(rt, sb) for sb in sandboxes) == capacity, "each node filled to its capacity"
        with pytest.raises(LimitReached, match=r"full \(6 of 6 servers on 3 node") as full:
            await rt.sandbox("calendar", isolation="container")
        assert NODE_RESOURCE in full.value.hint

        # one sandbox per node, driven by an MCP client through the gateway (both eras)
        per_node = {node_of(rt, sb): sb for sb in sandboxes}
        for i, sb in enumerate(per_node.values()):
            era = list(ERAS)[i % 2]
            async with mcp_client(sb.mcp_url, era, token=sb.token) as client:
                result = await client.call_tool("list_calendars", {})
                assert not result.is_error
                assert json.loads(result.content[0].text) == (await sb.call_tool("list_calendars")).value

        # containers are hardened and labelled per node, on that node's internal network
        engine = docker.from_env()
        for node in backend.nodes.values():
            sb = next(s for s in sandboxes if node_of(rt, s) == node.id)
            attrs = engine.containers.get(sb.server.id).attrs
            assert attrs["Config"]["Labels"][RUNTIME_LABEL] == node.runtime_id
            assert attrs["Config"]["User"] == "65534:65534" and attrs["HostConfig"]["ReadonlyRootfs"]
            assert list(attrs["NetworkSettings"]["Networks"]) == [f"envreg-{node.runtime_id}"]
            assert not attrs["HostConfig"].get("PortBindings")

        # freed capacity is used again, on the node that freed it
        released = sandboxes[0]
        where = node_of(rt, released)
        await released.close()
        assert node_of(rt, await rt.sandbox("calendar", isolation="container")) == where
        runtime_ids = [n.runtime_id for n in backend.nodes.values()]
    assert leftovers(runtime_ids) == []


async def test_every_tier_gives_the_docker_backends_results_and_state_hashes(cluster) -> None:
    scenarios = load_scenarios(load_environment("calendar").folder)[0]
    async with Runtime() as docker_rt, ray_runtime(cluster) as ray_rt:
        runs = [
            ("local", docker_rt, "local"),
            ("docker container", docker_rt, "container"),
            ("docker instance", docker_rt, "instance"),
            ("ray container", ray_rt, "container"),
            ("ray instance", ray_rt, "instance"),
        ]
        for scenario in scenarios:
            seen_by: dict[str, tuple] = {}
            for label, rt, isolation in runs:
                sb = await rt.sandbox("calendar", isolation=isolation, state=scenario.initial_state)
                seen: list[CallOutcome] = []

                async def call(tool, arguments, sb=sb, seen=seen):
                    result = await sb.call_tool(tool, arguments)
                    seen.append(CallOutcome(result.is_error, result.text))
                    return seen[-1]

                assert await run_steps(scenario, call) == [], (label, scenario.name)
                seen_by[label] = (await sb.state_sha256(), [(o.is_error, o.text) for o in seen])
                await sb.close()
            assert len(set(map(repr, seen_by.values()))) == 1, scenario.name


async def test_snapshot_restore_and_fork_across_nodes(cluster) -> None:
    async with ray_runtime(cluster) as rt:
        parent = await rt.sandbox("bank", isolation="container")
        for limit in (111, 222):
            await parent.call_tool("set_daily_limit", {"account_id": "acc_0001", "limit_cents": limit})
        snap = await parent.snapshot()
        at_snapshot = await parent.state_sha256()

        await rt.warm(
            "bank", "container", 4
        )  # warm capacity, placed like any server: each node holds a share
        rt.pool_sizes.clear()  # no refill: the fork takes exactly the warm units
        held = {server_id for node in rt.backend.nodes.values() for server_id in node.servers}
        assert all(node.servers for node in rt.backend.nodes.values()), "every node holds warm capacity"
        forks = await rt.fork(snap, 4, isolation="container")
        assert {f.server.id for f in forks} | {parent.server.id} == held, "the forks took the warm units"
        nodes = {node_of(rt, f) for f in forks}
        assert len(nodes | {node_of(rt, parent)}) == 3, "forks spread over every node"
        assert [await f.state_sha256() for f in forks] == [at_snapshot] * 4
        for i, fork in enumerate(forks):
            await fork.call_tool("set_daily_limit", {"account_id": "acc_0001", "limit_cents": 1000 + i})
        assert len({await f.state_sha256() for f in forks}) == 4, "each fork diverged on its own"
        assert await parent.state_sha256() == at_snapshot, "forks left the parent alone"

        elsewhere = next(f for f in forks if node_of(rt, f) != node_of(rt, parent))
        await elsewhere.restore(snap)
        assert await elsewhere.state_sha256() == at_snapshot
        await parent.call_tool("set_daily_limit", {"account_id": "acc_0001", "limit_cents": 333})
        await elsewhere.call_tool("set_daily_limit", {"account_id": "acc_0001", "limit_cents": 333})
        assert await elsewhere.state_sha256() == await parent.state_sha256(), (
            "same calls, same state, any node"
        )
        for fork in forks:
            await fork.close()

        shared = await rt.fork(snap, 3, isolation="instance")
        assert [await s.state_sha256() for s in shared] == [at_snapshot] * 3

        # leases are the runtime's, whichever node holds the sandbox
        leased = await rt.sandbox("bank", isolation="container", ttl=0.5)
        node = rt.backend.node_of(leased.server)
        engine = docker.from_env()
        with anyio.fail_after(15):  # reaped, and its container removed from its node's engine
            while leased.ended is None or engine.containers.list(all=True, filters={"id": leased.server.id}):
                await anyio.sleep(0.1)
        assert leased.ended == "its lease expired"
        assert leased.server.id not in node.servers


DRIVER = """
import asyncio, json, sys
from envreg.runtime import Runtime

async def main():
    async with Runtime(backend="ray", address=sys.argv[1]) as rt:
        for _ in range(6):
            await rt.sandbox("calendar", isolation="container")
        print(json.dumps([n.runtime_id for n in rt.backend.nodes.values()]), flush=True)
        await asyncio.sleep(3600)

asyncio.run(main())
"""


async def test_a_killed_driver_leaves_every_node_to_its_keeper_and_gc(cluster) -> None:
    driver = subprocess.Popen(
        [sys.executable, "-c", DRIVER, cluster.address], stdout=subprocess.PIPE, text=True
    )
    try:
        line = await anyio.to_thread.run_sync(driver.stdout.readline)
        runtime_ids = json.loads(line)
        assert len(runtime_ids) == 3
        assert set(runtime_ids) <= Liveness.read(docker.from_env()).alive, "every node's keeper runs"
    finally:
        driver.send_signal(signal.SIGKILL)
        driver.wait()
    with anyio.fail_after(60):  # Ray ends the driver's agents; each node's keeper exits with its agent
        while set(runtime_ids) & (liveness := Liveness.read(docker.from_env())).alive:
            await anyio.sleep(0.5)
    assert set(runtime_ids) <= set(liveness.gone_since), "`envreg gc` collects them once the grace has passed"
    assert leftovers(runtime_ids), "nothing was removed by anyone but gc"
    sweep_runtimes(runtime_ids)
    assert leftovers(runtime_ids) == []


async def test_losing_a_node_mid_episode_ends_its_sandboxes_and_nothing_else(cluster) -> None:
    doomed = cluster.add_node(**node_args(2))
    cluster.wait_for_nodes()
    async with ray_runtime(cluster, lost_after=3) as rt:
        containers = [await rt.sandbox("calendar", isolation="container") for _ in range(8)]  # every slot
        runtime_ids = [n.runtime_id for n in rt.backend.nodes.values()]
        on_doomed = [sb for sb in containers if node_of(rt, sb) == doomed.node_id]
        assert len(on_doomed) == 2
        await on_doomed.pop().close()  # the one free slot left is on the doomed node: so is the shared server
        instance = await rt.sandbox("calendar", isolation="instance")
        assert node_of(rt, instance) == doomed.node_id
        lost = [*on_doomed, instance]
        others = [sb for sb in containers if node_of(rt, sb) != doomed.node_id]
        for sb in [*lost, *others]:  # the episode is under way everywhere
            assert not (await sb.call_tool("list_calendars")).is_error
        url, token = instance.mcp_url, instance.token

        cluster.remove_node(doomed, allow_graceful=False)
        started = time.monotonic()
        for sb in lost:
            with pytest.raises(SandboxGone) as gone, anyio.fail_after(60):
                while True:  # the node's processes take a moment to die
                    await sb.call_tool("list_calendars")
                    await anyio.sleep(0.1)
            message = str(gone.value)
            assert doomed.node_id[:12] in message and "was lost" in message, message
        assert time.monotonic() - started < 30, "node loss is told within seconds, never a hang"
        with anyio.fail_after(30):
            while not all(sb.ended for sb in lost):
                await anyio.sleep(0.1)
        async with httpx2.AsyncClient() as http:
            refused = await http.post(url, headers={"authorization": f"Bearer {token}"}, json={})
        assert refused.status_code == 404, "the gateway no longer routes to it"

        for sb in others:  # the rest of the cluster goes on
            assert not (await sb.call_tool("list_calendars")).is_error
        await others[0].close()
        replacement = await rt.sandbox("calendar", isolation="container")
        assert node_of(rt, replacement) != doomed.node_id
    assert leftovers(runtime_ids) == [], "nothing of the runtime is left, the lost node's containers included"
