"""`Runtime(recycle=N)`: a container whose sandbox ended serves the next one from a fresh process."""

from __future__ import annotations

import anyio
import docker
import httpx2
import pytest
from mcp_helpers import caller, mcp_client

from envreg.env import load_environment, load_scenarios, states_equal
from envreg.env.scenario import run_steps
from envreg.protocol import ISOLATION_LABEL, RUNTIME_LABEL
from envreg.runtime import Runtime, SandboxGone

pytestmark = [pytest.mark.docker, pytest.mark.anyio]


@pytest.fixture(autouse=True)
def _images(reference_images) -> None:
    pass


def sandbox_containers(rt: Runtime) -> list[str]:
    """Ids of the runtime's container-tier containers, as the engine lists them."""
    filters = {"label": [f"{RUNTIME_LABEL}={rt.id}", f"{ISOLATION_LABEL}=container"]}
    return [c.id for c in docker.from_env().containers.list(all=True, filters=filters)]


async def test_a_recycled_container_serves_the_next_sandbox_from_a_fresh_process() -> None:
    scenario = load_scenarios(load_environment("calendar").folder)[0][0]
    async with Runtime() as plain:
        seed = await (await plain.sandbox("calendar", isolation="container")).state_sha256()
    async with Runtime(recycle=1) as rt:
        first = await rt.sandbox("calendar", isolation="container", state=scenario.initial_state)
        async with mcp_client(first.mcp_url, "2025-11-25", token=first.token) as client:
            assert await run_steps(scenario, caller(client)) == []
        snap = await first.snapshot()
        container, old_url, old_token = first.server.id, first.mcp_url, first.token
        env = docker.from_env().containers.get(container).attrs["Config"]["Env"]
        assert "ENVREG_RECYCLE=1" in env
        await first.close()
        assert sandbox_containers(rt) == [container]

        second = await rt.sandbox("calendar", isolation="container")
        assert second.server.id == container
        assert (await second.server.client.healthz())["generation"] == 1
        assert await second.state_sha256() == seed
        async with mcp_client(second.mcp_url, "2026-07-28", token=second.token) as client:
            listed = await client.call_tool("list_calendars", {})
            assert not listed.is_error
        async with httpx2.AsyncClient() as http:
            stale = await http.post(old_url, headers={"authorization": f"Bearer {old_token}"}, json={})
            assert stale.status_code in (404, 410)
        await second.restore(snap)  # the fresh process has no snapshots: it is sent again
        assert states_equal(await second.state(), scenario.final_state)
        assert sandbox_containers(rt) == [container]
    assert sandbox_containers(rt) == []


async def test_a_container_that_died_is_not_recycled() -> None:
    async with Runtime(recycle=1) as rt:
        sb = await rt.sandbox("calendar", isolation="container")
        docker.from_env().containers.get(sb.server.id).kill()
        with pytest.raises(SandboxGone):
            for _ in range(50):
                await sb.call_tool("list_calendars")
                await anyio.sleep(0.05)
        fresh = await rt.sandbox("calendar", isolation="container")
        assert fresh.server.id != sb.server.id
        assert not (await fresh.call_tool("list_calendars")).is_error


async def test_recycling_keeps_at_most_n_containers_per_environment() -> None:
    async with Runtime(recycle=1) as rt:
        sandboxes = [await rt.sandbox("calendar", isolation="container") for _ in range(3)]
        for sb in sandboxes:
            await sb.close()
        assert len(sandbox_containers(rt)) == 1
    async with Runtime() as rt:
        sb = await rt.sandbox("calendar", isolation="container")
        assert "ENVREG_RECYCLE=1" not in docker.from_env().containers.get(sb.server.id).attrs["Config"]["Env"]
        await sb.close()
        assert sandbox_containers(rt) == []
