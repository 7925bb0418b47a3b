"""The gateway as clients meet it: Host/Origin checks, CORS, errors that say what to do, event streams."""

from __future__ import annotations

import subprocess
import time

import anyio
import httpx2
import psutil
import pytest
import uvicorn
from gateway_helpers import LEGACY, LIST, MODERN, legacy_client
from mcp_helpers import mcp_client

from envreg.errors import UpstreamTimeout
from envreg.http.access import AccessGuard
from envreg.http.serving import QuietServer
from envreg.runtime import Runtime
from envreg.runtime.gateway import Gateway

pytestmark = [pytest.mark.docker, pytest.mark.anyio]


@pytest.fixture(autouse=True)
def _images(reference_images) -> None:
    pass


def auth(sb, **headers: str) -> dict[str, str]:
    return {"authorization": f"Bearer {sb.token}", **MODERN, **headers}


async def test_host_and_origin_are_checked_like_the_environment_server() -> None:
    async with Runtime() as rt, httpx2.AsyncClient() as http:
        sb = await rt.sandbox("calendar", isolation="instance")
        port = rt.gateway_url.rsplit(":", 1)[1]
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}"):
            r = await http.post(sb.mcp_url, json=LIST, headers=auth(sb, host=host))
            assert r.status_code == 200, (host, r.text)
        for host in ("evil.example.com", f"evil.example.com:{port}", "127.0.0.1:1", "localhost.evil.example"):
            r = await http.post(sb.mcp_url, json=LIST, headers=auth(sb, host=host))
            assert r.status_code == 421, (host, r.text)
            assert "DNS-rebinding" in r.json()["error"]
        for origin in ("http://evil.example.com", "null", f"http://evil.example.com:{port}", "file://"):
            r = await http.post(sb.mcp_url, json=LIST, headers=auth(sb, origin=origin))
            assert r.status_code == 403, (origin, r.text)
            assert "--cors-origin" in r.json()["error"]
        r = await http.post(sb.mcp_url, json=LIST, headers=auth(sb, origin=f"http://localhost:{port}"))
        assert r.status_code == 200, r.text
        # without CORS origins, a browser's preflight is refused and answers carry no CORS headers
        preflight = {"origin": "http://app.example", "access-control-request-method": "POST"}
        r = await http.options(sb.mcp_url, headers=preflight)
        assert r.status_code == 403 and "access-control-allow-origin" not in r.headers


async def test_extra_hosts_and_cors_origins_are_configurable() -> None:
    app = "http://app.example:5173"
    async with (
        Runtime(allowed_hosts=["gw.internal:*"], cors_origins=[app]) as rt,
        httpx2.AsyncClient() as http,
    ):
        sb = await rt.sandbox("calendar", isolation="instance")
        r = await http.post(sb.mcp_url, json=LIST, headers=auth(sb, host="gw.internal:8443"))
        assert r.status_code == 200, r.text
        requested = "authorization, content-type, mcp-protocol-version, mcp-session-id, last-event-id"
        r = await http.options(
            sb.mcp_url,
            headers={
                "origin": app,
                "access-control-request-method": "POST",
                "access-control-request-headers": requested,
            },
        )
        assert r.status_code == 200, r.text
        assert r.headers["access-control-allow-origin"] == app
        assert {m.strip() for m in r.headers["access-control-allow-methods"].split(",")} >= {
            "GET",
            "POST",
            "DELETE",
        }
        assert r.headers["access-control-allow-headers"] == requested
        # the browser's real request: the answer is readable, session headers exposed
        r = await http.post(sb.mcp_url, json=LIST, headers=auth(sb, origin=app))
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == app
        exposed = {h.strip().lower() for h in r.headers["access-control-expose-headers"].split(",")}
        assert {"mcp-session-id", "mcp-protocol-version", "www-authenticate"} <= exposed
        # a 401 is readable by that page too
        r = await http.post(sb.mcp_url, json=LIST, headers={**MODERN, "origin": app})
        assert r.status_code == 401 and r.headers["access-control-allow-origin"] == app
        r = await http.options(
            sb.mcp_url, headers={"origin": "http://other.example", "access-control-request-method": "POST"}
        )
        assert r.status_code == 403


def jsonrpc_error(r: httpx2.Response, rid: int | None = LIST["id"]) -> dict:
    """The JSON-RPC error of a gateway answer to an MCP request (for the request's id)."""
    body = r.json()
    assert body["jsonrpc"] == "2.0" and body["id"] == rid and body["error"]["code"] == -32600, body
    return body["error"]


async def test_errors_say_what_to_do_and_never_echo_huge_ids() -> None:
    async with Runtime(reap_interval=0.1) as rt, httpx2.AsyncClient() as http:
        sb = await rt.sandbox("calendar", isolation="instance")
        r = await http.post(sb.mcp_url, json=LIST, headers=MODERN)
        assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Bearer")
        error = jsonrpc_error(r)
        for words in ("Authorization: Bearer", "sb.token", "envreg run", "POST /v1/sandboxes"):
            assert words in error["message"], error
        assert error["data"] == {"sandbox": sb.id, "state": "no token"}
        r = await http.post(sb.mcp_url, json=LIST, headers={**MODERN, "authorization": "Bearer nope"})
        assert r.status_code == 401 and jsonrpc_error(r)["data"]["state"] == "wrong token"
        huge = "sb_" + "x" * 5000
        r = await http.post(f"{rt.gateway_url}/sandboxes/{huge}/mcp", json=LIST, headers=auth(sb))
        assert r.status_code == 404 and len(r.content) < 400 and "x" * 100 not in r.text, r.text
        assert jsonrpc_error(r)["data"]["state"] == "unknown"
        r = await http.post(f"{rt.gateway_url}/sandboxes/{huge}/mcp/more", json=LIST, headers=auth(sb))
        assert r.status_code == 404 and len(r.content) < 400, r.text
        # an ended lease says so, not just "unknown"
        short = await rt.sandbox("calendar", isolation="instance", ttl=0.3)
        await anyio.sleep(1.0)
        r = await http.post(short.mcp_url, json=LIST, headers=auth(short))
        assert r.status_code == 404 and jsonrpc_error(r)["message"].endswith("lease expired"), r.text
        await sb.close("deleted")
        r = await http.post(sb.mcp_url, json=LIST, headers=auth(sb))
        assert r.status_code == 404
        error = jsonrpc_error(r)
        assert error["message"] == f"sandbox {sb.id} has ended: deleted"
        assert error["data"] == {"sandbox": sb.id, "state": "ended"}
        # the session era's GET and DELETE are MCP requests too (no id to answer); anything else is not
        session = {**auth(sb), "mcp-protocol-version": LEGACY, "mcp-session-id": "abc"}
        for method in ("GET", "DELETE"):
            r = await http.request(method, sb.mcp_url, headers=session)
            assert r.status_code == 404 and jsonrpc_error(r, None)["data"]["state"] == "ended", r.text
        r = await http.post(sb.mcp_url, content=b"hello", headers={"authorization": f"Bearer {sb.token}"})
        assert r.status_code == 404 and r.json() == {"error": f"sandbox {sb.id} has ended: deleted"}


@pytest.mark.parametrize("era", ["2026-07-28", LEGACY])
async def test_the_mcp_client_shows_why_a_sandbox_refused_it(era: str) -> None:
    """The `mcp` SDK's client shows the gateway's message (not "Server returned an error response")."""
    async with Runtime() as rt:
        sb = await rt.sandbox("calendar", isolation="instance")
        with pytest.raises(Exception) as refused:
            async with mcp_client(sb.mcp_url, era, "wrong") as client:
                await client.list_tools()
        assert "missing or wrong sandbox token" in _messages(refused.value), _messages(refused.value)
        await sb.close("deleted")
        with pytest.raises(Exception) as ended:
            async with mcp_client(sb.mcp_url, era, sb.token) as client:
                await client.list_tools()
        assert f"sandbox {sb.id} has ended: deleted" in _messages(ended.value), _messages(ended.value)


def _messages(exc: BaseException) -> str:
    """Every message in an exception and the groups and causes around it, as a user reads a traceback."""
    parts = [str(exc)]
    for inner in getattr(exc, "exceptions", ()):
        parts.append(_messages(inner))
    if exc.__cause__ is not None:
        parts.append(_messages(exc.__cause__))
    return " | ".join(parts)


async def test_a_hung_sandbox_answers_504_naming_the_wait() -> None:
    async with Runtime() as rt, httpx2.AsyncClient(timeout=30) as http:
        sb = await rt.sandbox("calendar", isolation="container")
        gateway = Gateway(rt.get, http, timeout=1.5)
        server = QuietServer(
            uvicorn.Config(AccessGuard(gateway), port=0, log_level="warning", lifespan="off")
        )
        async with anyio.create_task_group() as tg:
            tg.start_soon(server.serve)
            while not server.started:
                await anyio.sleep(0.01)
            url = f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}/sandboxes/{sb.id}/mcp"
            assert (await http.post(url, json=LIST, headers=auth(sb))).status_code == 200
            subprocess.run(["docker", "pause", sb.server.id], check=True, capture_output=True)
            try:
                started = time.monotonic()
                r = await http.post(url, json=LIST, headers=auth(sb))
                waited = time.monotonic() - started
                # the runtime's own client (Python API, daemon REST) says the same, as a 504 error
                rt._http.timeout = httpx2.Timeout(1.5)
                with pytest.raises(UpstreamTimeout, match=r"no answer in 1\.5 s") as info:
                    await sb.call_tool("list_calendars", {})
                assert info.value.status == 504 and sb.ended is None
            finally:
                subprocess.run(["docker", "unpause", sb.server.id], check=True, capture_output=True)
            assert r.status_code == 504, r.text
            error = r.json()["error"]
            assert error["message"] == f"sandbox {sb.id}: no answer in 1.5 s; the call may still complete"
            assert error["code"] == -32603 and error["data"] == {"sandbox": sb.id, "state": "no answer"}
            assert 1.4 < waited < 10
            assert (await http.post(url, json=LIST, headers=auth(sb))).status_code == 200
            server.should_exit = True
            await gateway.aclose()


# --- the session era's GET event stream ------------------------------------------------------------


def upstream_connections(sb) -> int:
    """Open TCP connections from this process (the gateway) to the sandbox's agent port."""
    return sum(
        1
        for c in psutil.Process().net_connections(kind="tcp")
        if c.raddr and (c.raddr.ip, c.raddr.port) == sb.server.agent_address and c.status == "ESTABLISHED"
    )


async def open_stream(http: httpx2.AsyncClient, sb, session: str) -> int:
    """GET the session's event stream (as the client does when it reconnects) and leave at once."""
    headers = {
        "authorization": f"Bearer {sb.token}",
        "accept": "text/event-stream",
        "mcp-session-id": session,
        "mcp-protocol-version": LEGACY,
    }
    async with http.stream("GET", sb.mcp_url, headers=headers) as response:
        return response.status_code


@pytest.mark.parametrize("isolation", ["container", "instance"])
async def test_an_abandoned_event_stream_is_closed_upstream(isolation) -> None:
    async with Runtime() as rt, httpx2.AsyncClient(timeout=30) as http:
        sb = await rt.sandbox("calendar", isolation=isolation)
        sessions: list[str] = []
        for _ in range(4):
            async with legacy_client(sb, sessions) as client:
                assert not (await client.call_tool("list_calendars", {})).is_error
                await anyio.sleep(0.3)  # its GET stream is open now
        session = sessions[-1]
        # the client comes back on the same session: its stream can be reopened, again and again
        with anyio.fail_after(10):
            while (status := await open_stream(http, sb, session)) == 409:
                await anyio.sleep(0.1)
        assert status == 200
        for _ in range(3):
            assert await open_stream(http, sb, session) == 200
        # no upstream connection is held per abandoned stream (a pooled POST connection or two remain)
        await anyio.sleep(0.5)
        assert upstream_connections(sb) <= 2


async def test_a_stream_ends_when_its_sandbox_ends() -> None:
    async with Runtime() as rt:
        sb = await rt.sandbox("calendar", isolation="instance")
        other = await rt.sandbox("calendar", isolation="instance")
        sessions: list[str] = []
        async with legacy_client(sb, sessions):
            await anyio.sleep(0.3)
        headers = {
            "authorization": f"Bearer {sb.token}",
            "accept": "text/event-stream",
            "mcp-session-id": sessions[-1],
            "mcp-protocol-version": LEGACY,
        }
        async with httpx2.AsyncClient(timeout=30) as http:
            with anyio.fail_after(10):
                while True:
                    async with http.stream("GET", sb.mcp_url, headers=headers) as response:
                        if response.status_code == 409:
                            await anyio.sleep(0.1)
                            continue
                        assert response.status_code == 200
                        await sb.close("deleted")
                        started = time.monotonic()
                        async for _ in response.aiter_raw():
                            pass
                        break
            assert time.monotonic() - started < 5
            # the shared container and its other sandbox are fine
            async with mcp_client(other.mcp_url, LEGACY, token=other.token) as client:
                assert not (await client.call_tool("list_calendars", {})).is_error


async def test_leaving_the_runtime_with_open_streams_is_quick() -> None:
    ended = anyio.Event()
    async with httpx2.AsyncClient(timeout=30) as http, anyio.create_task_group() as tg:
        async with Runtime() as rt:
            sb = await rt.sandbox("calendar", isolation="container")
            sessions: list[str] = []
            async with legacy_client(sb, sessions):
                await anyio.sleep(0.3)
            headers = {
                "authorization": f"Bearer {sb.token}",
                "accept": "text/event-stream",
                "mcp-session-id": sessions[-1],
                "mcp-protocol-version": LEGACY,
            }

            async def read_stream(*, task_status) -> None:
                while True:
                    async with http.stream("GET", sb.mcp_url, headers=headers) as response:
                        if response.status_code != 409:
                            task_status.started(response.status_code)
                            async for _ in response.aiter_raw():
                                pass
                            ended.set()
                            return
                    await anyio.sleep(0.1)

            with anyio.fail_after(10):
                assert await tg.start(read_stream) == 200
            started = time.monotonic()
        with anyio.fail_after(10):
            await ended.wait()
        assert time.monotonic() - started < 10
