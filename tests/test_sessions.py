"""Sessions of the 2025-11-25 era on a real environment server: capped per instance and per server, ended
when idle or when their instance is deleted, and errors about them that clients can read."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import anyio
import httpx2
import pytest
from conftest import COUNTER
from mcp import MCPError
from mcp_helpers import mcp_client
from servers import modern_request

from envreg.http.client import request as http_request

pytestmark = pytest.mark.anyio

LEGACY = "2025-11-25"
ACCEPT = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}
GET = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "get", "arguments": {}}}


def session_headers(session_id: str) -> dict[str, str]:
    return {**ACCEPT, "mcp-session-id": session_id, "mcp-protocol-version": LEGACY}


def open_session(http: httpx2.Client, url: str) -> str:
    """Open a session as the TypeScript SDK does (initialize, initialized) and leave it open."""
    r = http.post(url, json=INITIALIZE, headers=ACCEPT)
    assert r.status_code == 200, r.text
    session_id = r.headers["mcp-session-id"]
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert http.post(url, json=note, headers=session_headers(session_id)).status_code == 202
    return session_id


def sessions(server) -> dict:
    return http_request("GET", f"{server.control_url}/healthz", headers=server.auth).json()["sessions"]


def test_caps_are_sized_to_the_memory_limit(tmp_path: Path) -> None:
    from envreg.server.sessions import SESSION_BYTES, SessionLimits, memory_limit

    mib = 1024 * 1024
    assert SESSION_BYTES == 48 * 1024
    limits = SessionLimits.for_memory(256 * mib)
    assert (limits.max_sessions, limits.max_per_instance) == (1365, 170)
    assert (
        SessionLimits.for_memory(128 * mib).max_sessions,
        SessionLimits.for_memory(128 * mib).max_per_instance,
    ) == (682, 85)
    assert SessionLimits.for_memory(64 * 1024 * mib).max_sessions == 10_000  # the SDK's own default, at most
    assert SessionLimits.for_memory(2 * mib).max_sessions == 16  # the least
    assert SessionLimits.for_memory(256 * mib, max_per_instance=5000).max_per_instance == 1365
    # a container's cgroup: v2, v1, none
    v2, v1, unlimited = tmp_path / "v2", tmp_path / "v1", tmp_path / "unlimited"
    (v1 / "memory").mkdir(parents=True)
    v2.mkdir()
    unlimited.mkdir()
    (v2 / "memory.max").write_text(f"{128 * mib}\n")
    (v1 / "memory" / "memory.limit_in_bytes").write_text(f"{256 * mib}\n")
    (unlimited / "memory.max").write_text("max\n")
    assert memory_limit(v2) == 128 * mib
    assert memory_limit(v1) == 256 * mib
    physical = memory_limit(tmp_path / "none")
    assert physical > 256 * mib and memory_limit(unlimited) == physical


async def test_an_instance_over_its_cap_loses_its_oldest_idle_session_and_its_client_is_told(
    env_server,
) -> None:
    server = env_server(COUNTER, True, "--max-sessions-per-instance", "4")
    flooder, neighbour = server.new_instance(), server.new_instance()
    with httpx2.Client(timeout=30) as http:
        kept = open_session(http, server.mcp_url(neighbour))
        opened = [open_session(http, server.mcp_url(flooder)) for _ in range(7)]
        before = sessions(server)
        assert before["max_per_instance"] == 4
        for evicted in opened[:3]:
            r = http.post(server.mcp_url(flooder), json=GET, headers=session_headers(evicted))
            assert r.status_code == 404, r.text
            error = r.json()
            assert error["id"] == 2 and error["error"]["code"] == -32600
            message = error["error"]["message"]
            assert f"session {evicted} was evicted" in message and "maximum of 4 open sessions" in message
            assert "initialize a new session" in message, message
        for live in [*opened[3:], kept]:
            url = server.mcp_url(flooder if live != kept else neighbour)
            r = http.post(url, json=GET, headers=session_headers(live))
            assert r.status_code == 200 and "result" in r.json(), r.text
        # the client that was told opens a new session and goes on; another oldest idle one makes room
        fresh = open_session(http, server.mcp_url(flooder))
        assert http.post(server.mcp_url(flooder), json=GET, headers=session_headers(fresh)).status_code == 200
        assert (
            http.post(server.mcp_url(flooder), json=GET, headers=session_headers(opened[3])).status_code
            == 404
        )


async def test_at_the_server_cap_the_instance_holding_the_most_gives_way(env_server) -> None:
    server = env_server(COUNTER, True, "--max-sessions", "6", "--max-sessions-per-instance", "5")
    quiet, busy = server.new_instance(), server.new_instance()
    with httpx2.Client(timeout=30) as http:
        oldest = open_session(http, server.mcp_url(quiet))  # the oldest idle session of the server
        for _ in range(12):
            open_session(http, server.mcp_url(busy))
        assert sessions(server)["open"] <= 6
        r = http.post(server.mcp_url(quiet), json=GET, headers=session_headers(oldest))
        assert r.status_code == 200, r.text


async def test_a_session_in_use_is_never_evicted(env_server) -> None:
    server = env_server(COUNTER, True, "--max-sessions-per-instance", "2")
    instance = server.new_instance()
    url = server.mcp_url(instance)
    async with httpx2.AsyncClient(timeout=30) as http:
        streaming = []
        async with anyio.create_task_group() as tg:
            for _ in range(2):
                r = await http.post(url, json=INITIALIZE, headers=ACCEPT)
                session_id = r.headers["mcp-session-id"]
                streaming.append(session_id)
                started = anyio.Event()

                async def hold(session_id: str = session_id, started: anyio.Event = started) -> None:
                    headers = {**session_headers(session_id), "accept": "text/event-stream"}
                    async with http.stream("GET", url, headers=headers) as stream:
                        assert stream.status_code == 200
                        started.set()
                        await anyio.sleep_forever()

                tg.start_soon(hold)
                await started.wait()
            # both hold an open event stream: none is idle, so a third is refused, saying why
            r = await http.post(url, json=INITIALIZE, headers=ACCEPT)
            assert r.status_code == 503, r.text
            assert "mcp-session-id" not in r.headers
            message = r.json()["error"]["message"]
            assert "maximum of 2 open sessions" in message and "every one is in use" in message
            for session_id in streaming:
                r = await http.post(url, json=GET, headers=session_headers(session_id))
                assert r.status_code == 200, r.text
            tg.cancel_scope.cancel()
        # their streams closed (once the server has seen them go), they are idle again: the next
        # initialize evicts the oldest
        with anyio.fail_after(10):
            while (r := await http.post(url, json=INITIALIZE, headers=ACCEPT)).status_code == 503:
                await anyio.sleep(0.05)
        assert r.status_code == 200, r.text


async def test_idle_sessions_expire_and_their_clients_are_told(env_server) -> None:
    server = env_server(COUNTER, True, "--session-idle-timeout", "1.5")
    instance = server.new_instance()
    url = server.mcp_url(instance)
    async with httpx2.AsyncClient(timeout=30) as http:
        idle = (await http.post(url, json=INITIALIZE, headers=ACCEPT)).headers["mcp-session-id"]
        streaming = (await http.post(url, json=INITIALIZE, headers=ACCEPT)).headers["mcp-session-id"]
        async with anyio.create_task_group() as tg:
            started = anyio.Event()

            async def hold() -> None:
                headers = {**session_headers(streaming), "accept": "text/event-stream"}
                async with http.stream("GET", url, headers=headers) as stream:
                    assert stream.status_code == 200
                    started.set()
                    await anyio.sleep_forever()

            tg.start_soon(hold)
            await started.wait()
            await anyio.sleep(2.5)
            r = await http.post(url, json=GET, headers=session_headers(idle))
            assert r.status_code == 404, r.text
            message = r.json()["error"]["message"]
            assert message.startswith(f"session {idle} expired after 1.5 s without a request"), message
            assert "initialize a new session" in message
            # a session with an open event stream is not idle
            r = await http.post(url, json=GET, headers=session_headers(streaming))
            assert r.status_code == 200, r.text
            tg.cancel_scope.cancel()
    assert sessions(server)["expired"] >= 1


async def test_sessions_end_with_their_instance(env_server) -> None:
    server = env_server(COUNTER, True, "--max-sessions-per-instance", "64")
    instance = server.new_instance()
    with httpx2.Client(timeout=30) as http:
        opened = [open_session(http, server.mcp_url(instance)) for _ in range(3)]
        assert sessions(server)["open"] >= 3
        r = http.delete(f"{server.control_url}/instances/{instance}", headers=server.auth)
        assert r.status_code == 204
        for session_id in opened:  # on any path: a session is not tied to one
            r = http.post(f"{server.url}/mcp", json=GET, headers=session_headers(session_id))
            assert r.status_code == 404, r.text
            assert (
                r.json()["error"]["message"]
                == f"session {session_id} ended with its instance, which was deleted"
            )
    deadline = time.monotonic() + 5
    while sessions(server)["open"] and time.monotonic() < deadline:
        await anyio.sleep(0.05)
    assert sessions(server)["open"] == 0


@pytest.mark.parametrize("fast_path", [True, False], ids=["lean", "sdk"])
async def test_errors_without_a_session_are_invalid_requests_and_name_no_session(
    env_server, fast_path
) -> None:
    server = env_server(COUNTER, fast_path)
    url = f"{server.url}/mcp"
    with httpx2.Client(timeout=30) as http:
        for body, words in (
            ([INITIALIZE], "JSON-RPC batches are not accepted"),
            ({"hello": "world"}, "not a JSON-RPC 2.0 message"),
            ({"jsonrpc": "2.0", "id": 4, "method": 5}, "not a JSON-RPC 2.0 message"),
        ):
            r = http.post(url, json=body, headers=ACCEPT)
            assert r.status_code == 400, r.text
            assert r.json()["error"]["code"] == -32600 and words in r.json()["error"]["message"], r.text
            assert "validation error" not in r.text.lower()
            assert "mcp-session-id" not in r.headers
        # a request that needs a session, without one: the SDK's 400, with no id of a session it did not keep
        r = http.post(url, json=GET, headers={**ACCEPT, "mcp-protocol-version": LEGACY})
        assert r.status_code == 400 and "mcp-session-id" not in r.headers, r.text
        r = http.post(url, content=b"{", headers=ACCEPT)
        assert r.status_code == 400 and r.json()["error"]["code"] == -32700
        assert "mcp-session-id" not in r.headers


@pytest.mark.parametrize("fast_path", [True, False], ids=["lean", "sdk"])
async def test_header_values_with_surrounding_whitespace_are_accepted(env_server, fast_path) -> None:
    """RFC 9110 5.5: a field value excludes leading and trailing whitespace (`Mcp-Name:  get `)."""
    server = env_server(COUNTER, fast_path)
    body, headers = modern_request("tools/call", {"name": "get", "arguments": {}})
    headers = {k: f" {v} \t" if k.startswith("mcp-") else v for k, v in headers.items()}
    status, answer = raw_post(server.port, "/mcp", json.dumps(body).encode(), headers)
    assert status == 200 and "result" in json.loads(answer), answer


async def test_the_mcp_client_reads_why_its_session_ended(env_server) -> None:
    """The `mcp` SDK's own client in the session era shows what the server said (a JSON-RPC error with a
    404). A client holding its event stream open, as this one does, is never idle: it is not evicted,
    and expires only once gone; tests/test_js_clients.py has a TypeScript client meet an eviction."""
    server = env_server(COUNTER)
    instance = server.new_instance()
    async with mcp_client(server.mcp_url(instance), LEGACY) as client:
        await client.call_tool("get", {})
        r = http_request("DELETE", f"{server.control_url}/instances/{instance}", headers=server.auth)
        assert r.status_code == 204
        with pytest.raises(MCPError, match=f"no instance '{instance}': deleted or never created"):
            await client.call_tool("get", {})


def raw_post(port: int, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, str]:
    """A POST written byte for byte (HTTP clients refuse to send header values with surrounding spaces)."""
    head = f"POST {path} HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\ncontent-length: {len(body)}\r\nconnection: close\r\n"
    head += "".join(f"{k}:{v}\r\n" for k, v in headers.items())
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(head.encode() + b"\r\n" + body)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    status_line, _, rest = data.partition(b"\r\n")
    return int(status_line.split()[1]), rest.partition(b"\r\n\r\n")[2].decode()


@pytest.mark.parametrize("entry", [["envreg.cli.main", "serve-env"], ["envreg.server"]], ids=["cli", "image"])
@pytest.mark.parametrize(
    "flag", [["--max-sessions", "0"], ["--session-idle-timeout", "0"]], ids=["cap", "idle"]
)
def test_limits_that_cannot_work_are_refused_saying_why(entry: list[str], flag: list[str]) -> None:
    args = [
        sys.executable,
        "-m",
        *entry,
        COUNTER,
        "--token",
        "t",
        "--port",
        "0",
        "--control-port",
        "0",
        *flag,
    ]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0, proc.stderr  # nothing was started
    assert (
        "error: session limits must be positive" in proc.stderr and "hint: give --max-sessions" in proc.stderr
    )
    assert "Traceback" not in proc.stderr
