"""Keep-alive, aligned: every port says how long it keeps an idle connection (``Keep-Alive: timeout=N``)
and closes it later than that, so a client that reuses its connection after pausing exactly that long
never sends its call into a connection being closed (Node's fetch reported those as `fetch failed`)."""

from __future__ import annotations

import json

import anyio
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream
from daemon_helpers import DaemonProcess
from servers import modern_request

from envreg.http.client import request as http_request
from envreg.protocol import KEEP_ALIVE_SECONDS
from envreg.runtime import Runtime

pytestmark = pytest.mark.anyio
LIST, MODERN = modern_request("tools/list")
PAUSE = 2  # the keep-alive the ports under test are given: the pause is exactly that


class Connection:
    """One HTTP/1.1 connection, written and read byte for byte, so that it is reused or the test fails."""

    def __init__(self, stream: anyio.abc.SocketStream) -> None:
        self.stream = stream
        self.reader = BufferedByteReceiveStream(stream)

    @classmethod
    async def open(cls, port: int) -> Connection:
        return cls(await anyio.connect_tcp("127.0.0.1", port))

    async def request(
        self, method: str, path: str, headers: dict[str, str], body: bytes = b""
    ) -> tuple[int, dict[bytes, bytes], bytes]:
        port = self.stream.extra(anyio.abc.SocketAttribute.remote_port)
        head = f"{method} {path} HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\ncontent-length: {len(body)}\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        await self.stream.send(head.encode() + b"\r\n" + body)
        with anyio.fail_after(30):
            raw = await self.reader.receive_until(b"\r\n\r\n", 65536)
            lines = raw.split(b"\r\n")
            answer = {
                k.strip().lower(): v.strip() for k, _, v in (line.partition(b":") for line in lines[1:])
            }
            if b"content-length" in answer:
                data = await self.reader.receive_exactly(int(answer[b"content-length"]))
            else:
                data = b""
                while size := int((await self.reader.receive_until(b"\r\n", 1024)).split(b";")[0], 16):
                    data += await self.reader.receive_exactly(size)
                    await self.reader.receive_exactly(2)
                await self.reader.receive_until(b"\r\n", 1024)
        return int(lines[0].split()[1]), answer, data

    async def aclose(self) -> None:
        await self.stream.aclose()


async def pause_and_reuse(
    port: int, method: str, path: str, headers: dict[str, str], body: bytes = b""
) -> None:
    """Call, then twice: pause exactly the advertised keep-alive and call again on the same connection."""
    conn = await Connection.open(port)
    try:
        status, answer, data = await conn.request(method, path, headers, body)
        assert status == 200, data
        assert answer[b"keep-alive"] == f"timeout={PAUSE}".encode()
        for _ in range(2):
            await anyio.sleep(PAUSE)
            status, answer, data = await conn.request(method, path, headers, body)
            assert status == 200, data
    finally:
        await conn.aclose()


@pytest.mark.docker
@pytest.mark.parametrize("route", ["fast lane", "asgi"])
async def test_the_runtime_gateway_keeps_a_connection_a_client_reuses_after_exactly_its_keep_alive(
    reference_images, route: str
) -> None:
    async with Runtime(gateway_keep_alive=PAUSE) as rt:
        sb = await rt.sandbox("calendar", isolation="instance")
        port = int(rt.gateway_url.rsplit(":", 1)[1])
        headers = {**MODERN, "authorization": f"Bearer {sb.token}"}
        if route == "asgi":  # the fast lane leaves such a connection to uvicorn and the ASGI gateway
            headers["origin"] = f"http://127.0.0.1:{port}"
        path = sb.mcp_url.removeprefix(rt.gateway_url)
        calls = rt._lane.calls
        await pause_and_reuse(port, "POST", path, headers, json.dumps(LIST).encode())
        assert (rt._lane.calls > calls) == (route == "fast lane")


@pytest.mark.docker
async def test_the_daemon_keeps_a_connection_a_client_reuses_after_exactly_its_keep_alive(
    reference_images, tmp_path
) -> None:
    daemon = DaemonProcess(tmp_path, extra=["--keep-alive", str(PAUSE)]).start()
    try:
        r = daemon.request("POST", "/v1/sandboxes", {"env": "calendar", "isolation": "instance"})
        assert r.status_code == 201, r.text
        sb = r.json()
        headers = {**MODERN, "authorization": f"Bearer {sb['token']}"}
        path = sb["mcp_url"].removeprefix(daemon.url)
        await pause_and_reuse(daemon.port, "POST", path, headers, json.dumps(LIST).encode())
        # the REST API on the same port
        await pause_and_reuse(daemon.port, "GET", "/v1/healthz", {"authorization": f"Bearer {daemon.token}"})
    finally:
        daemon.stop()


async def test_the_environment_server_says_its_keep_alive_on_both_planes(env_server) -> None:
    from conftest import COUNTER

    server = env_server(COUNTER)
    r = http_request("POST", f"{server.url}/mcp", json=LIST, headers=MODERN)
    assert r.status_code == 200 and r.headers["keep-alive"] == f"timeout={KEEP_ALIVE_SECONDS}"
    r = http_request("GET", f"{server.control_url}/healthz", headers=server.auth)
    assert r.headers["keep-alive"] == f"timeout={KEEP_ALIVE_SECONDS}"
