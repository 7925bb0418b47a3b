"""The runtime's HTTP client for environment servers: what a sandbox does when a connection cannot be made."""

from __future__ import annotations

import socket

import httpx2
import pytest

from envreg.errors import SandboxGone, UpstreamConnectTimeout, UpstreamError
from envreg.runtime.backends.base import EnvSpec, Server
from envreg.runtime.client import EnvClient
from envreg.runtime.sandbox import CONNECT_ATTEMPTS, Sandbox
from envreg.runtime.snapshots import SnapshotStore

pytestmark = pytest.mark.anyio


def server_losing_syns(lost: int) -> tuple[httpx2.MockTransport, list[str]]:
    """A control plane whose first `lost` connections time out before anything is sent."""
    seen: list[str] = []

    def handle(request: httpx2.Request) -> httpx2.Response:
        seen.append(request.url.path)
        if len(seen) <= lost:
            raise httpx2.ConnectTimeout("connection attempt timed out", request=request)
        return httpx2.Response(200, json={"sha256": "ab" * 32, "state": {}})

    return httpx2.MockTransport(handle), seen


def sandbox_on(http: httpx2.AsyncClient, status: str, tmp_path) -> tuple[Sandbox, list[str]]:
    """A sandbox on a server the backend reports as `status`; returns it and the ends it saw."""
    client = EnvClient(http, "http://sandbox:8000", "http://sandbox:8001", "token")
    server = Server(
        id="srv", spec=EnvSpec(key="k", name="calendar", digest="d" * 64), client=client, dedicated=True
    )
    released: list[str] = []

    async def release(sandbox: Sandbox) -> None:
        released.append(sandbox.ended or "")

    async def server_status(_: Server) -> str:
        return status

    sandbox = Sandbox(
        server,
        "default",
        "container",
        snapshots=SnapshotStore(tmp_path),
        release=release,
        server_status=server_status,
    )
    return sandbox, released


async def test_a_connection_that_timed_out_to_a_running_server_is_made_again(tmp_path) -> None:
    transport, seen = server_losing_syns(CONNECT_ATTEMPTS - 1)
    async with httpx2.AsyncClient(transport=transport, timeout=httpx2.Timeout(30, connect=2)) as http:
        sandbox, released = sandbox_on(http, "running", tmp_path)
        assert await sandbox.state_sha256() == "ab" * 32
    assert len(seen) == CONNECT_ATTEMPTS and not released


async def test_a_running_server_that_never_accepts_is_a_timeout_naming_the_wait(tmp_path) -> None:
    transport, seen = server_losing_syns(CONNECT_ATTEMPTS)
    async with httpx2.AsyncClient(transport=transport, timeout=httpx2.Timeout(30, connect=2)) as http:
        sandbox, released = sandbox_on(http, "running", tmp_path)
        with pytest.raises(UpstreamConnectTimeout, match="no answer in 2 s"):
            await sandbox.state_sha256()
    assert len(seen) == CONNECT_ATTEMPTS and not released


async def test_a_stopped_server_ends_the_sandbox_after_one_timeout(tmp_path) -> None:
    transport, seen = server_losing_syns(CONNECT_ATTEMPTS)
    async with httpx2.AsyncClient(transport=transport, timeout=httpx2.Timeout(30, connect=2)) as http:
        sandbox, released = sandbox_on(http, "exited (exit code 137)", tmp_path)
        with pytest.raises(SandboxGone, match="exit code 137"):
            await sandbox.state_sha256()
    assert len(seen) == 1 and released == ["its server is exited (exit code 137)"]


async def test_a_refused_connection_fails_at_once() -> None:
    with socket.socket() as sock:  # a loopback port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    async with httpx2.AsyncClient(timeout=httpx2.Timeout(30, connect=2)) as http:
        client = EnvClient(http, f"http://127.0.0.1:{port}", f"http://127.0.0.1:{port}", "token")
        with pytest.raises(UpstreamError, match="did not answer") as caught:
            await client.state_sha256("default")
    assert not isinstance(caught.value, UpstreamConnectTimeout)


async def test_a_body_over_a_planes_limit_is_too_large_naming_the_limit_and_changes_nothing() -> None:
    """A real environment server in process, both planes capped at 2 KiB: a 413 is `TooLarge` (the
    error tree's 413), on the agent plane as on the control plane, and its message names the limit."""
    from conftest import COUNTER

    from envreg.errors import TooLarge
    from envreg.server.app import EnvServer, ServerConfig

    agent, control = EnvServer.build(ServerConfig(env=COUNTER, token="token", max_body=2048)).planes()
    mounts = {
        "http://127.0.0.1:8000": httpx2.ASGITransport(app=agent),
        "http://127.0.0.1:8001": httpx2.ASGITransport(app=control),
    }
    async with httpx2.AsyncClient(mounts=mounts) as http:
        client = EnvClient(http, "http://127.0.0.1:8000", "http://127.0.0.1:8001", "token")
        before = await client.get_state("default")
        with pytest.raises(TooLarge, match="limit of 2,048 bytes"):
            await client.call_tool("default", "increment", {"by": "9" * 4096})
        with pytest.raises(TooLarge, match="limit of 2,048 bytes"):
            await client.put_state("default", {**before, "padding": "x" * 4096})
        assert await client.get_state("default") == before
        assert (await client.call_tool("default", "increment", {})).error is None
