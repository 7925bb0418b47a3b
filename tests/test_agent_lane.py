"""The agent plane's fast path (`envreg.server.agent_lane` on `envreg.http.fastpath`), over raw sockets.

The environment server's agent plane served by uvicorn in the test's loop, as `serve_async` serves it
(the lane's protocol in front of the ASGI plane): the lean path's answers come off the socket, everything
else (pipelined after a refusal, chunked bodies, HTTP/1.0, a client that leaves half-way) through ASGI.
"""

from __future__ import annotations

import asyncio
import json
import socket

import anyio
import anyio.abc
import pytest
from conftest import COUNTER
from servers import modern_request
from test_fastlane import read_answers, served

from envreg.http.asgi import KeepAlive
from envreg.protocol import DEFAULT_INSTANCE
from envreg.server.agent_lane import AgentLane
from envreg.server.app import EnvServer, ServerConfig

pytestmark = pytest.mark.anyio
AGENT_TOKEN = "agent-t0ken"


class Served:
    """An environment server's agent plane on a loopback port, its lane in front."""

    def __init__(self, keep_alive: int = 5, **config) -> None:
        self.server = EnvServer.build(ServerConfig(env=COUNTER, token="t", agent_token=AGENT_TOKEN, **config))
        self.lane = AgentLane(self.server.agent, keep_alive, self.server.lease)
        self.keep_alive = keep_alive
        self.port = 0

    async def __aenter__(self) -> Served:
        agent, _ = self.server.planes()
        # the SDK, which answers what the lean path hands on, on demand
        self._sdk = asyncio.get_running_loop().create_task(self.server.agent.sdk.run())
        self._served = served(KeepAlive(agent, self.keep_alive), self.lane, self.keep_alive)
        self.port = await self._served.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._served.__aexit__(None, None, None)
        self._sdk.cancel()

    @property
    def value(self) -> int:
        return self.server.store.get(DEFAULT_INSTANCE).state.value

    def call(
        self, rid: int, tool: str = "increment", token: str = AGENT_TOKEN, version: str = "1.1"
    ) -> bytes:
        arguments = {"by": 1} if tool == "increment" else {}
        body, headers = modern_request("tools/call", {"name": tool, "arguments": arguments}, rid=rid)
        data = json.dumps(body).encode()
        head = f"POST /mcp HTTP/{version}\r\nhost: 127.0.0.1:{self.port}\r\nauthorization: Bearer {token}\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        return f"{head}content-length: {len(data)}\r\n\r\n".encode() + data


def result(body: bytes) -> object:
    return json.loads(json.loads(body)["result"]["content"][0]["text"])


async def test_tool_calls_are_answered_off_the_socket_with_the_lean_paths_answer() -> None:
    async with Served() as served, await anyio.connect_tcp("127.0.0.1", served.port) as stream:
        await stream.send(served.call(1))
        [(status, body)] = await read_answers(stream, 1)
        assert status == 200 and json.loads(body)["id"] == 1 and served.lane.calls == 1
        assert served.value == result(body) == 1


async def test_pipelined_calls_are_answered_in_order_then_asgi_takes_over() -> None:
    async with Served() as served, await anyio.connect_tcp("127.0.0.1", served.port) as stream:
        bad = served.call(3, token="wrong")
        await stream.send(served.call(1) + served.call(2) + bad + served.call(4))
        answers = await read_answers(stream, 4)
        assert [s for s, _ in answers] == [200, 200, 401, 200]
        assert [json.loads(b)["id"] for _, b in answers] == [1, 2, None, 4]
        assert served.lane.calls == 2, "the refused call and everything after it went through ASGI"
        assert served.value == 3


@pytest.mark.parametrize("form", ["chunked", "http/1.0", "initialize"])
async def test_what_the_lane_does_not_take_is_answered_by_the_asgi_plane(form: str) -> None:
    async with Served() as served, await anyio.connect_tcp("127.0.0.1", served.port) as stream:
        request = served.call(1, version="1.0" if form == "http/1.0" else "1.1")
        if form == "chunked":
            head, _, data = request.partition(b"\r\n\r\n")
            head = head.replace(b"content-length: ", b"transfer-encoding: chunked\r\nx-was: ")
            request = head + b"\r\n\r\n" + b"%x\r\n%b\r\n0\r\n\r\n" % (len(data), data)
        if form == "initialize":  # a session-era request: the lean path hands it to the SDK
            request = request.replace(
                b"mcp-protocol-version: 2026-07-28", b"mcp-protocol-version: 2025-11-25"
            )
        await stream.send(request)
        [(status, _)] = await read_answers(stream, 1)
        assert served.lane.calls == 0
        if form != "initialize":
            assert status == 200 and served.value == 1


async def test_a_client_that_leaves_half_way_changes_nothing_and_others_are_served() -> None:
    async with Served() as served:
        async with await anyio.connect_tcp("127.0.0.1", served.port) as stream:
            await stream.send(served.call(1)[:-10])  # the body is 10 bytes short
        async with await anyio.connect_tcp("127.0.0.1", served.port) as stream:
            await stream.send(served.call(2))
            [(status, body)] = await read_answers(stream, 1)
        assert status == 200 and result(body) == 1 and served.value == 1


async def test_a_reader_that_does_not_read_gets_every_answer_in_order_once_it_reads() -> None:
    """Back-pressure: 2,000 calls sent at once by a client with a 4 KiB receive buffer that reads none for a
    while; the server's writes pause and resume, and no answer is lost or reordered."""
    async with Served() as served, await anyio.connect_tcp("127.0.0.1", served.port) as stream:
        raw = stream.extra(anyio.abc.SocketAttribute.raw_socket)
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        await stream.send(b"".join(served.call(i, tool="get") for i in range(1, 2001)))
        await anyio.sleep(0.3)
        raw.setsockopt(
            socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20
        )  # reads at speed now (a 4 KiB window is slow)
        answers = await read_answers(stream, 2000)
        assert [json.loads(b)["id"] for _, b in answers] == list(range(1, 2001))
        assert served.lane.calls == 2000


async def test_a_recycled_servers_lease_refuses_a_pinned_call_through_asgi() -> None:
    async with (
        Served(recyclable=True, generation=2) as served,
        await anyio.connect_tcp("127.0.0.1", served.port) as stream,
    ):
        stale = served.call(1).replace(b"\r\n\r\n", b"\r\nx-envreg-generation: 1\r\n\r\n", 1)
        await stream.send(stale)
        [(status, body)] = await read_answers(stream, 1)
        assert status == 410 and served.lane.calls == 0 and served.value == 0
        assert "recycled" in json.loads(body)["error"]["message"]


async def test_a_head_with_bare_line_feeds_is_answered_not_held() -> None:
    """A client that ends its lines with LF alone (RFC 9112 2.2 lets a server accept them): the lane never
    sees the CRLF CRLF it looks for, so it must hand such a request to uvicorn at once, not wait for more."""
    async with Served() as served, await anyio.connect_tcp("127.0.0.1", served.port) as stream:
        head, _, body = served.call(1).partition(b"\r\n\r\n")
        await stream.send(head.replace(b"\r\n", b"\n") + b"\n\n" + body)
        with anyio.fail_after(5):
            [(status, _)] = await read_answers(stream, 1)
        assert served.lane.calls == 0 and status in (200, 400)


async def test_an_idle_connection_is_closed_after_the_keep_alive_time_and_a_busy_one_is_not() -> None:
    async with Served(keep_alive=1) as served, await anyio.connect_tcp("127.0.0.1", served.port) as stream:
        # 1.4 s of calls 0.2 s apart: longer than the keep-alive time, never idle as long
        for rid in range(1, 8):
            await stream.send(served.call(rid))
            [(status, body)] = await read_answers(stream, 1)
            assert status == 200 and json.loads(body)["id"] == rid
            await anyio.sleep(0.2)
        assert served.lane.calls == 7 and served.value == 7
        idle_from = anyio.current_time() - 0.2
        with anyio.fail_after(10), pytest.raises(anyio.EndOfStream):
            await stream.receive()
        assert anyio.current_time() - idle_from >= 0.95  # closed by the keep-alive time, not before it
