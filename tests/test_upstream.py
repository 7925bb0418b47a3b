"""The gateway's pooled HTTP/1.1 upstream client, against tiny raw servers on loopback."""

from __future__ import annotations

import anyio
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream

from envreg.runtime.upstream import UpstreamPool

pytestmark = pytest.mark.anyio


async def serve(responses: list[bytes], close_after: bool = False):
    """A server answering each request with the next canned response; counts connections."""
    state = {"connections": 0, "requests": []}

    async def handle(stream) -> None:
        state["connections"] += 1
        reader = BufferedByteReceiveStream(stream)
        async with stream:
            while responses:
                try:
                    head = await reader.receive_until(b"\r\n\r\n", 65536)
                except (anyio.EndOfStream, anyio.IncompleteRead):
                    return
                length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length"))  # fmt: skip
                state["requests"].append(head.split(b"\r\n")[0] + b" " + await reader.receive_exactly(length))
                await stream.send(responses.pop(0))
                if close_after:
                    return

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    return listener, handle, port, state


async def body_of(pool: UpstreamPool, key, payload: bytes = b"{}") -> tuple[int, bytes]:
    response = await pool.post(key, "/mcp", [(b"content-type", b"application/json")], payload)
    return response.status, b"".join([chunk async for chunk in response.body])


JSON = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"


async def test_connections_are_reused_and_bodies_forwarded() -> None:
    listener, handle, port, state = await serve([JSON, JSON, JSON])
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, handle)
        pool = UpstreamPool()
        for i in range(3):
            assert await body_of(pool, ("c1", "127.0.0.1", port), b'{"i":%d}' % i) == (200, b"{}")
        assert state["connections"] == 1
        assert state["requests"][2] == b'POST /mcp HTTP/1.1 {"i":2}'
        await pool.aclose()
        tg.cancel_scope.cancel()


async def test_chunked_responses_are_decoded() -> None:
    chunked = (b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
               b"5\r\nevent\r\n7\r\n: data\n\r\n0\r\n\r\n")  # fmt: skip
    listener, handle, port, _ = await serve([chunked, JSON])
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, handle)
        pool = UpstreamPool()
        assert await body_of(pool, ("c1", "127.0.0.1", port)) == (200, b"event: data\n")
        assert await body_of(pool, ("c1", "127.0.0.1", port)) == (200, b"{}"), "the connection stays usable"
        await pool.aclose()
        tg.cancel_scope.cancel()


async def test_a_pooled_connection_the_server_dropped_is_replaced() -> None:
    listener, handle, port, state = await serve([JSON, JSON], close_after=True)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, handle)
        pool = UpstreamPool()
        assert await body_of(pool, ("c1", "127.0.0.1", port)) == (200, b"{}")
        await anyio.sleep(0.05)  # the server has closed that connection meanwhile
        assert await body_of(pool, ("c1", "127.0.0.1", port)) == (200, b"{}")
        assert state["connections"] == 2 and len(state["requests"]) == 2, "sent once, on a new connection"
        await pool.aclose()
        tg.cancel_scope.cancel()


async def test_a_new_container_at_an_old_address_gets_new_connections() -> None:
    listener, handle, port, state = await serve([JSON, JSON])
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, handle)
        pool = UpstreamPool()
        await body_of(pool, ("old", "127.0.0.1", port))
        await body_of(pool, ("new", "127.0.0.1", port))
        assert state["connections"] == 2
        await pool.aclose()
        tg.cancel_scope.cancel()
