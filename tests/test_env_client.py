"""The runtime's HTTP client for environment servers: what it does when a connection cannot be made."""

from __future__ import annotations

import socket

import httpx2
import pytest

from envreg.errors import UpstreamError, UpstreamTimeout
from envreg.runtime.client import CONNECT_ATTEMPTS, EnvClient

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


async def test_a_connection_that_timed_out_is_made_again() -> None:
    transport, seen = server_losing_syns(CONNECT_ATTEMPTS - 1)
    async with httpx2.AsyncClient(transport=transport, timeout=httpx2.Timeout(30, connect=2)) as http:
        client = EnvClient(http, "http://sandbox:8000", "http://sandbox:8001", "token")
        assert await client.state_sha256("default") == "ab" * 32
    assert len(seen) == CONNECT_ATTEMPTS


async def test_a_server_that_never_accepts_is_a_timeout_naming_the_wait() -> None:
    transport, seen = server_losing_syns(CONNECT_ATTEMPTS)
    async with httpx2.AsyncClient(transport=transport, timeout=httpx2.Timeout(30, connect=2)) as http:
        client = EnvClient(http, "http://sandbox:8000", "http://sandbox:8001", "token")
        with pytest.raises(UpstreamTimeout, match="no answer in 2 s"):
            await client.state_sha256("default")
    assert len(seen) == CONNECT_ATTEMPTS


async def test_a_refused_connection_fails_at_once() -> None:
    with socket.socket() as sock:  # a loopback port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    async with httpx2.AsyncClient(timeout=httpx2.Timeout(30, connect=2)) as http:
        client = EnvClient(http, f"http://127.0.0.1:{port}", f"http://127.0.0.1:{port}", "token")
        with pytest.raises(UpstreamError, match="did not answer"):
            await client.state_sha256("default")
