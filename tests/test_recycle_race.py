"""A recycled server's next sandbox starts at the seed, whatever the last one still had in flight.

A recyclable environment server (``ENVREG_RECYCLE=1``, as a Docker runtime with ``recycle=N`` starts
them), sandbox A's calls in flight on both ways in (the runtime's own client, the gateway's fast lane
and its ASGI path), then A's close (the recycle) 0-30 ms later: B, leased the fresh process, finds the
seed state, and A's calls after its close began are refused with a clear error, never carried out.
"""

from __future__ import annotations

import random
import secrets
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx2
import pytest
from conftest import COUNTER, scaled
from servers import EnvServerProcess, modern_request
from test_fastlane import LanedGateway, Route

from envreg.errors import SandboxGone, UpstreamError
from envreg.runtime.backends.base import Upstream
from envreg.runtime.client import EnvClient

pytestmark = pytest.mark.anyio
CALLS = 40


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[EnvServerProcess, str]]:
    agent_token = secrets.token_urlsafe(12)
    environ = {"ENVREG_RECYCLE": "1", "TMPDIR": str(tmp_path)}
    # one argument: a urlsafe token may begin with "-", which argparse would take for an option
    proc = EnvServerProcess(
        COUNTER, image_entry=True, environ=environ, extra=[f"--agent-token={agent_token}"]
    )
    yield proc.start(), agent_token
    proc.stop()


async def generation(http: httpx2.AsyncClient, server: EnvServerProcess) -> int:
    return (await http.get(f"{server.control_url}/healthz", headers=server.auth)).json()["generation"]


async def recycle(http: httpx2.AsyncClient, server: EnvServerProcess) -> int:
    """A's close, as the runtime makes it: ask for a fresh process and wait until it answers."""
    response = await http.post(f"{server.control_url}/recycle", headers=server.auth)
    assert response.status_code == 202, response.text
    ending = response.json()["generation"]
    while True:
        try:  # as the runtime does: a connection the ending process drops means "not yet"
            fresh = await generation(http, server)
        except httpx2.TransportError:
            fresh = ending
        if fresh != ending:
            return fresh
        await anyio.sleep(0.005)


async def increment_through(
    http: httpx2.AsyncClient, gateway: LanedGateway, route: Route, lane: bool
) -> tuple[int, dict]:
    """One `increment` through the gateway: its fast lane, or its ASGI path (a query string leaves the lane)."""
    body, headers = modern_request("tools/call", {"name": "increment", "arguments": {}})
    url = gateway.url(route) + ("" if lane else "?via=asgi")
    response = await http.post(url, json=body, headers={**headers, "authorization": f"Bearer {route.token}"})
    return response.status_code, response.json()


async def calls_of_a(
    http: httpx2.AsyncClient, a: EnvClient, gateway: LanedGateway, route: Route, outcomes: list[str]
) -> None:
    """A's calls in flight: half through its own client, half through the gateway (both paths)."""

    async def direct() -> None:
        try:
            await a.call_tool("default", "increment", {})
            outcomes.append("done")
        except SandboxGone as exc:
            assert "ended" in str(exc), exc
            outcomes.append("refused")
        except UpstreamError as exc:  # sent as the ending process closed its connections
            assert "did not answer" in str(exc), exc
            outcomes.append("refused")

    async def gatewayed(lane: bool) -> None:
        status, answer = await increment_through(http, gateway, route, lane)
        if status == 200:
            assert not answer["result"].get("isError"), answer
            outcomes.append("done")
        else:  # refused, or sent as the ending process closed its connections
            assert (status == 410 and "ended" in answer["error"]["message"]) or (
                status == 502 and "did not answer" in answer["error"]["message"]
            ), (status, answer)
            outcomes.append("refused")

    async with anyio.create_task_group() as tg:
        for i in range(CALLS):
            if i % 2:
                tg.start_soon(direct)
            else:
                tg.start_soon(gatewayed, i % 4 == 0)


async def test_calls_in_flight_at_a_recycle_never_land_in_the_next_sandbox(
    server: tuple[EnvServerProcess, str],
) -> None:
    proc, agent_token = server
    rng = random.Random(27)
    attempts = scaled(12, 4)
    outcomes: list[str] = []
    async with httpx2.AsyncClient(timeout=30) as http, LanedGateway({}) as gateway:
        base = EnvClient(http, proc.url, proc.control_url, proc.token, agent_token)
        for attempt in range(attempts):
            pinned = await generation(http, proc)
            a = base.pinned(pinned)
            upstream = Upstream("127.0.0.1", proc.port, "/mcp", agent_token, f"srv-{attempt}", pinned)
            route = Route("sb_" + secrets.token_hex(8), secrets.token_urlsafe(16), upstream)
            gateway.routes[route.id] = route  # never marked ended: the server alone must refuse
            async with anyio.create_task_group() as tg:
                tg.start_soon(calls_of_a, http, a, gateway, route, outcomes)
                await anyio.sleep(rng.uniform(0, 0.03))
                fresh = await recycle(http, proc)
            b = base.pinned(fresh)
            assert (await b.get_state("default"))["value"] == 0, f"attempt {attempt}: B is not at the seed"
            with pytest.raises(SandboxGone, match="recycled for another sandbox"):
                await a.call_tool("default", "increment", {})
            for lane in (True, False):
                status, answer = await increment_through(http, gateway, route, lane)
                assert status == 410 and "recycled for another sandbox" in answer["error"]["message"]
            assert (await b.get_state("default"))["value"] == 0
            del gateway.routes[route.id]
    assert len(outcomes) == attempts * CALLS


def test_a_recycle_waits_for_the_calls_it_took_and_refuses_new_ones(
    server: tuple[EnvServerProcess, str],
) -> None:
    """Once the recycle is asked the ending process takes nothing more (410), but still reports health."""
    proc, agent_token = server
    body, headers = modern_request("tools/call", {"name": "increment", "arguments": {}})
    headers = {**headers, "authorization": f"Bearer {agent_token}", "x-envreg-generation": "0"}
    http = httpx2  # a new connection per request: the ending process closes those it kept
    assert http.post(f"{proc.url}/mcp", json=body, headers=headers).status_code == 200
    assert http.post(f"{proc.control_url}/recycle", headers=proc.auth).status_code == 202
    deadline = time.monotonic() + 10
    while http.get(f"{proc.control_url}/healthz", headers=proc.auth).json()["generation"] == 0:
        assert time.monotonic() < deadline
    stale = http.post(f"{proc.url}/mcp", json=body, headers=headers)
    assert stale.status_code == 410
    assert stale.json()["error"]["data"] == {"state": "ended"}
    state = http.get(f"{proc.control_url}/instances/default/state", headers=proc.auth).json()
    assert state["state"]["value"] == 0
