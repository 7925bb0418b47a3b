"""The daemon's port (REST API + gateway) as clients meet it: auth hints, Host/Origin, CORS, clean shutdown."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator

import anyio
import httpx2
import pytest
from daemon_helpers import DaemonProcess
from gateway_helpers import LEGACY, LIST, MODERN, legacy_client
from servers import modern_request

from envreg.http.client import request as http_request

APP = "http://localhost:6274"  # where the MCP Inspector's web UI runs


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    proc = DaemonProcess(
        tmp_path_factory.mktemp("daemon-home"), extra=["--cors-origin", APP, "--allow-host", "envreg.test:*"]
    ).start()
    yield proc
    proc.stop()


def test_a_401_says_how_to_authenticate(daemon: DaemonProcess) -> None:
    for token in ("", "wrong"):
        r = daemon.request("GET", "/v1/sandboxes", token=token)
        assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Bearer")
        error = r.json()["error"]
        assert "Authorization: Bearer" in error and "$ENVREG_HOME/daemon.json" in error, error


def test_huge_ids_are_not_echoed(daemon: DaemonProcess) -> None:
    huge = "sb_" + "y" * 5000
    for r in (
        daemon.request("GET", f"/v1/sandboxes/{huge}"),
        http_request("POST", f"{daemon.url}/sandboxes/{huge}/mcp", json=LIST, headers=MODERN),
    ):
        assert r.status_code == 404 and len(r.content) < 400 and "y" * 100 not in r.text, r.text


def test_host_and_origin_are_checked_on_the_whole_port(daemon: DaemonProcess) -> None:
    auth = {"authorization": f"Bearer {daemon.token}"}
    for path in ("/v1/healthz", "/sandboxes/sb_x/mcp"):
        r = http_request("GET", daemon.url + path, headers={**auth, "host": "evil.example.com"})
        assert r.status_code == 421, r.text
        r = http_request("GET", daemon.url + path, headers={**auth, "origin": "http://evil.example.com"})
        assert r.status_code == 403, r.text
    assert (
        http_request(
            "GET", daemon.url + "/v1/healthz", headers={**auth, "host": "envreg.test:443"}
        ).status_code
        == 200
    )
    assert http_request("GET", daemon.url + "/v1/healthz", headers={**auth, "origin": APP}).status_code == 200


def test_cors_preflights_are_answered_for_configured_origins(daemon: DaemonProcess) -> None:
    for path in ("/v1/sandboxes", "/sandboxes/sb_x/mcp"):
        r = httpx2.options(
            daemon.url + path,
            headers={
                "origin": APP,
                "access-control-request-method": "POST",
                "access-control-request-headers": "authorization, content-type, mcp-protocol-version",
            },
        )
        assert r.status_code == 200, r.text
        assert r.headers["access-control-allow-origin"] == APP
        assert "authorization" in r.headers["access-control-allow-headers"]
    r = http_request("GET", daemon.url + "/v1/healthz", headers={"origin": APP})
    assert r.status_code == 401 and r.headers["access-control-allow-origin"] == APP
    assert "www-authenticate" in r.headers["access-control-expose-headers"].lower()


def test_no_cors_by_default(tmp_path_factory: pytest.TempPathFactory) -> None:
    proc = DaemonProcess(tmp_path_factory.mktemp("daemon-home")).start()
    try:
        r = httpx2.options(
            proc.url + "/v1/sandboxes", headers={"origin": APP, "access-control-request-method": "POST"}
        )
        assert r.status_code == 403 and "access-control-allow-origin" not in r.headers
    finally:
        proc.stop()


# --- with sandboxes --------------------------------------------------------------------------------


class Stub:
    """The little of a sandbox `legacy_client` needs: its MCP URL and token."""

    def __init__(self, info: dict) -> None:
        self.id, self.mcp_url, self.token = info["id"], info["mcp_url"], info["token"]


async def hold_stream(http: httpx2.AsyncClient, sb: Stub, session: str, *, task_status) -> None:
    """Open the session's event stream (retrying while the old one is still being released), read it to its end."""
    headers = {
        "authorization": f"Bearer {sb.token}",
        "accept": "text/event-stream",
        "mcp-session-id": session,
        "mcp-protocol-version": LEGACY,
    }
    while True:
        async with http.stream("GET", sb.mcp_url, headers=headers) as response:
            if response.status_code != 409:
                task_status.started(response.status_code)
                async for _ in response.aiter_raw():
                    pass
                return
        await anyio.sleep(0.1)


async def stream_of(http: httpx2.AsyncClient, tg, info: dict) -> int:
    sb = Stub(info)
    sessions: list[str] = []
    async with legacy_client(sb, sessions) as client:
        assert not (await client.call_tool("list_calendars", {})).is_error
    with anyio.fail_after(10):
        return await tg.start(hold_stream, http, sb, sessions[-1])


@pytest.mark.docker
@pytest.mark.anyio
async def test_open_streams_end_cleanly_when_sandboxes_stop_and_the_daemon_stops(
    tmp_path_factory: pytest.TempPathFactory, reference_images
) -> None:
    proc = DaemonProcess(tmp_path_factory.mktemp("daemon-home"), extra=["--log-level", "info"]).start()
    try:
        async with httpx2.AsyncClient(timeout=30) as http, anyio.create_task_group() as tg:
            for isolation in ("container", "instance"):
                info = proc.ok(
                    "POST", "/v1/sandboxes", {"env": "calendar", "isolation": isolation}, status=201
                )
                assert await stream_of(http, tg, info) == 200
                proc.ok("DELETE", f"/v1/sandboxes/{info['id']}", status=204)
            # an expired lease is named as such, on the API and on the MCP URL
            info = proc.ok(
                "POST", "/v1/sandboxes", {"env": "calendar", "isolation": "instance", "ttl": 0.5}, status=201
            )
            await anyio.sleep(2.5)
            r = proc.request("GET", f"/v1/sandboxes/{info['id']}")
            assert r.status_code == 404 and r.json()["error"].endswith("lease expired"), r.text
            r = await http.post(
                info["mcp_url"], json=LIST, headers={**MODERN, "authorization": f"Bearer {info['token']}"}
            )
            assert r.status_code == 404 and r.json()["error"]["message"].endswith("lease expired"), r.text
            assert r.json()["error"]["data"] == {"sandbox": info["id"], "state": "ended"}
            # the daemon stops promptly while agents hold streams open
            for isolation in ("container", "instance"):
                info = proc.ok(
                    "POST", "/v1/sandboxes", {"env": "calendar", "isolation": isolation}, status=201
                )
                assert await stream_of(http, tg, info) == 200
            started = time.monotonic()
            proc.proc.send_signal(signal.SIGTERM)
            await anyio.to_thread.run_sync(proc.proc.wait, 30)
            stopped = time.monotonic() - started
    finally:
        output = proc.stop()
    assert "Traceback" not in output and "Exception in ASGI application" not in output, output
    assert "timeout graceful shutdown exceeded" not in output, output
    assert stopped < 5, (stopped, output)


@pytest.mark.docker
def test_tool_calls_on_the_daemons_port_take_the_gateways_fast_path(
    daemon: DaemonProcess, reference_images
) -> None:
    """The daemon's port relays a plain tool call as the runtime's own gateway does, off the socket
    (`/v1/healthz` counts them); what the fast path leaves (another allowed Host) gets the same answer
    through ASGI."""
    before = daemon.ok("GET", "/v1/healthz")["fast_path_calls"]
    assert isinstance(before, int), "the daemon serves without its fast path"
    info = daemon.ok("POST", "/v1/sandboxes", {"env": "calendar", "isolation": "instance"}, status=201)
    try:
        body, headers = modern_request("tools/call", {"name": "list_calendars", "arguments": {}})
        headers = {**headers, "authorization": f"Bearer {info['token']}"}
        answers = []
        for host in (None, None, "envreg.test:443"):
            r = http_request(
                "POST", info["mcp_url"], json=body, headers={**headers, **({"host": host} if host else {})}
            )
            assert r.status_code == 200, r.text
            answers.append(r.json()["result"]["content"])
        assert answers[0] == answers[1] == answers[2]
        assert daemon.ok("GET", "/v1/healthz")["fast_path_calls"] == before + 2
        wrong = http_request(
            "POST", info["mcp_url"], json=body, headers={**headers, "authorization": "Bearer nope"}
        )
        assert wrong.status_code == 401 and daemon.ok("GET", "/v1/healthz")["fast_path_calls"] == before + 2
    finally:
        daemon.ok("DELETE", f"/v1/sandboxes/{info['id']}", status=204)
