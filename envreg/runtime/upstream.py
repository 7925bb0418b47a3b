"""Keep-alive HTTP/1.1 connections from the gateway to environment servers: its hot path for POSTs.

An MCP request is one POST with a JSON body; its answer is JSON with a Content-Length (or a chunked
SSE stream). Forwarding it over a pooled raw connection costs a fraction of a general client.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import AsyncIterator
from dataclasses import dataclass

import anyio
from anyio.abc import SocketStream
from anyio.streams.buffered import BufferedByteReceiveStream

from envreg.errors import UpstreamError, UpstreamTimeout
from envreg.protocol import UPSTREAM_IDLE_SECONDS

MAX_HEAD = 64 * 1024
READ_TIMEOUT = 30.0


@dataclass(eq=False)
class _Connection:
    stream: SocketStream
    reader: BufferedByteReceiveStream
    idle_since: float = 0.0


@dataclass
class UpstreamResponse:
    status: int
    headers: list[tuple[bytes, bytes]]
    body: AsyncIterator[bytes]


Key = tuple[str, str, int]
"""(container id, host, port): a new container that gets an old one's address never gets its connections."""


class UpstreamPool:
    """Idle connections per upstream; a connection goes back only after a complete response."""

    def __init__(self, timeout: float = READ_TIMEOUT) -> None:
        self.timeout = timeout
        self._idle: dict[Key, list[_Connection]] = defaultdict(list)
        self._purged = time.monotonic()

    async def _connection(self, key: Key) -> tuple[_Connection, bool]:
        """A pooled connection (and True) or a new one (and False)."""
        now = time.monotonic()
        if now - self._purged > UPSTREAM_IDLE_SECONDS:
            await self._purge(now)
        idle = self._idle[key]
        while idle:
            conn = idle.pop()
            if now - conn.idle_since < UPSTREAM_IDLE_SECONDS:
                return conn, True
            await conn.stream.aclose()
        try:
            with anyio.fail_after(self.timeout):
                stream = await anyio.connect_tcp(key[1], key[2])
        except TimeoutError:
            raise UpstreamTimeout(f"no answer in {self.timeout:g} s") from None
        return _Connection(stream, BufferedByteReceiveStream(stream)), False

    async def _purge(self, now: float) -> None:
        """Close connections idle too long (their containers may be gone)."""
        self._purged = now
        for key in list(self._idle):
            keep = [c for c in self._idle[key] if now - c.idle_since < UPSTREAM_IDLE_SECONDS]
            for conn in self._idle.pop(key):
                if conn not in keep:
                    await conn.stream.aclose()
            if keep:
                self._idle[key] = keep

    async def post(
        self, key: Key, target: str, headers: list[tuple[bytes, bytes]], body: bytes
    ) -> UpstreamResponse:
        """Send a POST and return the response head; iterate `body` to the end to free the connection."""
        _, host, port = key
        head = [f"POST {target} HTTP/1.1\r\nhost: {host}:{port}\r\ncontent-length: {len(body)}\r\n".encode()]
        request = b"".join(head + [k + b": " + v + b"\r\n" for k, v in headers]) + b"\r\n" + body
        while True:
            conn, reused = await self._connection(key)
            try:
                with anyio.fail_after(self.timeout):
                    await conn.stream.send(request)
                    raw = await conn.reader.receive_until(b"\r\n\r\n", MAX_HEAD)
                break
            except TimeoutError:
                await conn.stream.aclose()
                raise UpstreamTimeout(f"no answer in {self.timeout:g} s") from None
            except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.IncompleteRead, OSError) as exc:
                await conn.stream.aclose()
                if not reused:  # a pooled connection the server (or its container) dropped: try a new one
                    raise UpstreamError(f"{host}:{port} closed the connection: {exc!r}") from exc
        lines = raw.split(b"\r\n")
        try:
            status = int(lines[0].split(b" ", 2)[1])
            response_headers = [
                (k.strip().lower(), v.strip()) for k, _, v in (line.partition(b":") for line in lines[1:])
            ]
        except (IndexError, ValueError) as exc:
            await conn.stream.aclose()
            raise UpstreamError(f"{host}:{port} sent a malformed response head") from exc
        return UpstreamResponse(status, response_headers, self._body(key, conn, dict(response_headers)))

    async def _body(self, key: Key, conn: _Connection, headers: dict[bytes, bytes]) -> AsyncIterator[bytes]:
        reusable = headers.get(b"connection", b"").lower() != b"close"
        try:
            if b"content-length" in headers:
                length = int(headers[b"content-length"])
                if length:
                    yield await conn.reader.receive_exactly(length)
            elif headers.get(b"transfer-encoding", b"").lower() == b"chunked":
                while True:
                    size = int((await conn.reader.receive_until(b"\r\n", 1024)).split(b";")[0], 16)
                    if size == 0:
                        await conn.reader.receive_until(b"\r\n", MAX_HEAD)
                        break
                    yield await conn.reader.receive_exactly(size)
                    await conn.reader.receive_exactly(2)
            else:  # delimited by the end of the connection
                reusable = False
                while True:
                    try:
                        yield await conn.reader.receive()
                    except anyio.EndOfStream:
                        break
        except BaseException:
            reusable = False
            raise
        finally:
            if reusable:
                conn.idle_since = time.monotonic()
                self._idle[key].append(conn)
            else:
                with anyio.CancelScope(shield=True):
                    await conn.stream.aclose()

    async def aclose(self) -> None:
        for idle in self._idle.values():
            for conn in idle:
                await conn.stream.aclose()
        self._idle.clear()
