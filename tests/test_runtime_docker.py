"""The Docker tiers: hardened per-conversation containers and shared-container instances, one API."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import anyio
import docker
import httpx2
import pytest
from conftest import REFERENCE_ENVS, scaled
from mcp_helpers import ERAS, caller, mcp_client

from envreg.canonical import canonical_json
from envreg.env import UnknownToolError, load_environment, load_scenarios, states_equal
from envreg.env.scenario import CallOutcome, run_steps, strip_volatile
from envreg.runtime import InvalidState, Runtime, SandboxGone, SnapshotMismatch

pytestmark = [pytest.mark.docker, pytest.mark.anyio]
DOCKER_TIERS = ["container", "instance"]


@pytest.fixture(autouse=True)
def _images(reference_images) -> None:
    pass


@pytest.fixture(scope="module")
async def shared_runtime(reference_images):
    """One runtime for the tests that do not depend on a fresh one; recycled containers give each
    container-tier sandbox a fresh server without a container start."""
    async with Runtime(recycle=4) as runtime:
        yield runtime


@pytest.fixture
async def rt(shared_runtime):
    """The shared runtime; the sandboxes a test leaves open are closed after it."""
    before = set(shared_runtime.sandboxes)
    yield shared_runtime
    for sandbox_id in set(shared_runtime.sandboxes) - before:
        await shared_runtime.sandboxes[sandbox_id].close()


@pytest.mark.parametrize("isolation", DOCKER_TIERS)
@pytest.mark.parametrize("era", ERAS)
async def test_mcp_client_drives_a_sandbox_through_the_gateway(rt, isolation, era) -> None:
    scenario = load_scenarios(load_environment("calendar").folder)[0][0]
    sb = await rt.sandbox("calendar", isolation=isolation, state=scenario.initial_state)
    assert sb.mcp_url.startswith(rt.gateway_url + "/sandboxes/")
    async with mcp_client(sb.mcp_url, era, token=sb.token) as client:
        assert await run_steps(scenario, caller(client)) == []
    assert states_equal(await sb.state(), scenario.final_state)


@pytest.mark.parametrize("name", REFERENCE_ENVS)
async def test_every_tier_gives_the_same_results(rt, name) -> None:
    env = load_environment(name)
    scenarios = load_scenarios(env.folder)[0]
    for scenario in scenarios:
        outcomes = {}
        for isolation in ("local", *DOCKER_TIERS):
            sb = await rt.sandbox(name, isolation=isolation, state=scenario.initial_state)
            seen: list[CallOutcome] = []

            async def call(tool, arguments, sb=sb, seen=seen):
                result = await sb.call_tool(tool, arguments)
                seen.append(CallOutcome(result.is_error, result.text))
                return seen[-1]

            assert await run_steps(scenario, call) == [], (isolation, scenario.name)
            # volatile paths (BFCL's file system stamps files with the wall clock) are not results
            state = canonical_json(strip_volatile(await sb.state(), env.volatile))
            outcomes[isolation] = (state, [(o.is_error, o.text) for o in seen])
            await sb.close()
        assert outcomes["local"] == outcomes["container"] == outcomes["instance"], scenario.name


@pytest.mark.slow
@pytest.mark.parametrize("isolation", DOCKER_TIERS)
async def test_fifty_concurrent_sandboxes_each_keep_their_own_state(isolation) -> None:
    count = scaled(50, 12)
    async with Runtime() as rt:
        sandboxes = []

        async def lease() -> None:
            sandboxes.append(await rt.sandbox("bank", isolation=isolation))

        async with anyio.create_task_group() as tg:
            for _ in range(count):
                tg.start_soon(lease)
        assert len({sb.id for sb in sandboxes}) == count

        def calls(i: int) -> list[tuple[str, dict]]:
            return [
                ("set_daily_limit", {"account_id": "acc_0001", "limit_cents": 1000 * (i + 1) + step})
                for step in range(20)
            ]

        async def drive(i: int, sb) -> None:
            for tool, arguments in calls(i):
                result = await sb.call_tool(tool, arguments)
                assert not result.is_error, result.text

        async with anyio.create_task_group() as tg:
            for i, sb in enumerate(sandboxes):
                tg.start_soon(drive, i, sb)

        env = load_environment("bank")
        for i, sb in enumerate(sandboxes):
            expected = env.instance()
            for tool, arguments in calls(i):
                expected.call_tool(tool, arguments)
            assert await sb.state_sha256() == expected.state.sha256(), f"sandbox {i} diverged"


@pytest.mark.parametrize("isolation", DOCKER_TIERS)
async def test_snapshot_restore_and_forks(rt, isolation) -> None:
    straight = await rt.sandbox("bank", isolation=isolation)
    parent = await rt.sandbox("bank", isolation=isolation)
    for limit in (111, 222):
        await straight.call_tool("set_daily_limit", {"account_id": "acc_0001", "limit_cents": limit})
        await parent.call_tool("set_daily_limit", {"account_id": "acc_0001", "limit_cents": limit})
    snap = await parent.snapshot()
    await parent.reset()
    await parent.restore(snap)
    await straight.call_tool("set_daily_limit", {"account_id": "acc_0001", "limit_cents": 333})
    await parent.call_tool("set_daily_limit", {"account_id": "acc_0001", "limit_cents": 333})
    assert await parent.state_sha256() == await straight.state_sha256()

    forks = await rt.fork(snap, 8, isolation=isolation)
    for i, fork in enumerate(forks):
        await fork.call_tool("set_daily_limit", {"account_id": "acc_0001", "limit_cents": 1000 + i})
    limits = [(await f.call_tool("get_balance", {"account_id": "acc_0001"})).value for f in forks]
    assert len({str(v) for v in limits}) == 8, "each fork diverged on its own"
    assert await parent.state_sha256() == await straight.state_sha256(), "forks left the parent alone"


async def test_sandbox_containers_are_hardened(rt) -> None:
    sb = await rt.sandbox("calendar", isolation="container")
    attrs = docker.from_env().containers.get(sb.server.id).attrs
    host = attrs["HostConfig"]
    assert attrs["Config"]["User"] == "65534:65534"
    assert host["ReadonlyRootfs"] is True
    assert host["CapDrop"] == ["ALL"]
    assert any("no-new-privileges" in opt for opt in host["SecurityOpt"])
    assert host["PidsLimit"] > 0 and host["Memory"] > 0 and host["NanoCpus"] > 0
    assert not host.get("PortBindings")
    networks = attrs["NetworkSettings"]["Networks"]
    assert list(networks) == [rt.backend.network_name]
    net = docker.from_env().networks.get(rt.backend.network_name).attrs
    assert net["Internal"] is True
    assert attrs["Config"]["Labels"]["io.envreg.runtime"] == rt.id
    assert attrs["Config"]["Labels"]["io.envreg.lease"].startswith("ls_")
    assert int(attrs["Config"]["Labels"]["io.envreg.expires"]) > time.time()


async def test_a_killed_container_fails_the_next_call_fast() -> None:
    async with Runtime() as rt:
        sb = await rt.sandbox("calendar", isolation="container")
        await sb.call_tool("list_calendars")
        docker.from_env().containers.get(sb.server.id).kill()
        started = time.monotonic()
        with pytest.raises(SandboxGone, match=r"ended|container"):
            for _ in range(50):
                await sb.call_tool("list_calendars")
                await anyio.sleep(0.05)
        assert time.monotonic() - started < 5


async def test_an_expired_lease_is_reclaimed() -> None:
    async with Runtime(reap_interval=0.1) as rt:
        sb = await rt.sandbox("calendar", isolation="container", ttl=0.5)
        container_id = sb.server.id
        url, token = sb.mcp_url, sb.token
        engine = docker.from_env()
        with anyio.fail_after(10):  # the reaper ends it and removes its container soon after its expiry
            while sb.ended is None or engine.containers.list(all=True, filters={"id": container_id}):
                await anyio.sleep(0.05)
        assert sb.ended == "its lease expired"
        with pytest.raises(SandboxGone, match="lease expired"):
            await sb.call_tool("list_calendars")
        assert rt.get(sb.id) is None
        async with httpx2.AsyncClient() as http:
            r = await http.post(url, headers={"authorization": f"Bearer {token}"}, json={})
        assert r.status_code == 404


async def test_gateway_refuses_wrong_tokens_and_unknown_sandboxes(rt) -> None:
    sb = await rt.sandbox("calendar", isolation="instance")
    async with httpx2.AsyncClient() as http:
        for headers in ({}, {"authorization": "Bearer wrong"}, {"authorization": f"Bearer {sb.token}x"}):
            assert (await http.post(sb.mcp_url, headers=headers, json={})).status_code == 401
        unknown = sb.mcp_url.replace(sb.id, "sb_0000000000000000")
        r = await http.post(unknown, headers={"authorization": f"Bearer {sb.token}"}, json={})
        assert r.status_code == 404
        await sb.close()
        r = await http.post(sb.mcp_url, headers={"authorization": f"Bearer {sb.token}"}, json={})
        assert r.status_code == 404


@pytest.mark.parametrize("isolation", DOCKER_TIERS)
async def test_bad_input_changes_nothing(rt, isolation) -> None:
    bank = await rt.sandbox("bank", isolation=isolation)
    calendar = await rt.sandbox("calendar", isolation=isolation)
    before = await bank.state_sha256()
    with pytest.raises(SnapshotMismatch, match="calendar"):
        await bank.restore(await calendar.snapshot())
    with pytest.raises(InvalidState) as info:
        await bank.load_state({"customers": "nobody"})
    assert info.value.errors
    with pytest.raises(UnknownToolError):
        await bank.call_tool("no_such_tool", {})
    bad = await bank.call_tool("transfer", {"from_account_id": "acc_0001"})
    assert bad.is_error and "missing required argument" in bad.text
    assert await bank.state_sha256() == before


async def test_warm_pools_hand_out_ready_sandboxes() -> None:
    async with Runtime() as rt:
        await rt.warm("calendar", "container", 2)
        await rt.warm("calendar", "instance", 4)
        started = time.monotonic()
        sb = await rt.sandbox("calendar", isolation="container")
        inst = await rt.sandbox("calendar", isolation="instance")
        assert time.monotonic() - started < 0.5, "warm acquisition must not start containers"
        assert not (await sb.call_tool("list_calendars")).is_error
        assert not (await inst.call_tool("list_calendars")).is_error


async def test_close_removes_the_network_even_with_an_endpoint_left_on_it() -> None:
    """An endpoint the runtime did not remove (here a container of someone else's, attached to the sandbox
    network) is forced out by its name, so that the network goes with the runtime."""
    client = docker.from_env()
    async with Runtime() as rt:
        sb = await rt.sandbox("bank", isolation="container")
        network = rt.backend.network_name
        image = client.containers.get(sb.server.id).image.id
        stranger = client.containers.run(image, entrypoint=["sleep", "60"], detach=True, network=network)
    try:
        assert not client.networks.list(names=[network])
        stranger.reload()
        assert network not in stranger.attrs["NetworkSettings"]["Networks"]
    finally:
        stranger.remove(force=True)
        client.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="a runtime that is not root reaches containers on their ports")
async def test_the_gateway_reaches_a_container_on_its_own_sealed_socket() -> None:
    engine = docker.from_env()
    async with Runtime() as rt:
        first = await rt.sandbox("calendar", isolation="container")
        second = await rt.sandbox("calendar", isolation="container")
        folders = []
        for sb in (first, second):
            assert sb.server.agent_socket is not None, "no agent socket: is the engine on this machine?"
            folder = Path(sb.server.agent_socket).parent
            attrs = engine.containers.get(sb.server.id).attrs
            assert folder == Path(f"/dev/shm/envreg-0/{rt.id}/{attrs['Config']['Labels']['io.envreg.lease']}")
            assert attrs["HostConfig"]["Binds"] == [f"{folder}:/run/envreg:rw"]  # its folder, and only its
            assert stat.S_IMODE(folder.stat().st_mode) == 0o555 and os.listdir(folder) == ["agent.sock"]
            touched = engine.containers.get(sb.server.id).exec_run("touch /run/envreg/x", user="65534:65534")
            assert touched.exit_code != 0 and b"Permission denied" in touched.output  # sealed
            folders.append(folder)
        assert folders[0] != folders[1]
        async with mcp_client(first.mcp_url, "2026-07-28", token=first.token) as client:
            result = await client.call_tool("list_calendars", {})
        assert not result.is_error
        assert rt._lane is not None and [k[-1] for k, conns in rt._lane.idle.items() if conns] == [
            str(folders[0] / "agent.sock")
        ]  # the lane's pooled connection is on the socket
        await first.close()
        assert not folders[0].exists() and folders[1].exists()  # removed with its container
    assert not folders[1].exists() and not Path(f"/dev/shm/envreg-0/{rt.id}").exists()
