"""A loopback HTTP/1.1 proxy that adds one header, for clients that cannot send it (the conformance suite).

It adds ``Authorization: Bearer <token>`` to every request and changes nothing else: Host, Origin and
bodies go upstream as sent, answers (event streams included) come back byte for byte, and a client
that leaves closes its upstream connection.
"""

from __future__ import annotations

from contextlib import asynccontextmanager

import anyio
from anyio.abc import SocketAttribute, SocketStream
from anyio.streams.buffered import BufferedByteReceiveStream


class TokenProxy:
    def __init__(self, upstream: tuple[str, int], token: str) -> None:
        self.upstream = upstream
        self.header = f"authorization: Bearer {token}\r\n".encode()
        self.port = 0

    @asynccontextmanager
    async def serving(self):
        """Listen on 127.0.0.1 (``self.port``) while the block runs."""
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
        self.port = listener.extra(SocketAttribute.local_port)
        async with listener, anyio.create_task_group() as tg:
            tg.start_soon(listener.serve, self._handle)
            yield self
            tg.cancel_scope.cancel()

    async def _handle(self, client: SocketStream) -> None:
        async with (
            client,
            await anyio.connect_tcp(*self.upstream) as upstream,
            anyio.create_task_group() as tg,
        ):
            tg.start_soon(self._answers, upstream, client, tg.cancel_scope)
            reader = BufferedByteReceiveStream(client)
            try:
                while True:
                    head = await reader.receive_until(b"\r\n\r\n", 64 * 1024)
                    request_line, *lines = head.split(b"\r\n")
                    kept, length = [], 0
                    for line in lines:
                        name = line.partition(b":")[0].strip().lower()
                        if name == b"content-length":
                            length = int(line.partition(b":")[2])
                        elif name == b"transfer-encoding":
                            raise ValueError("the token proxy takes requests with a Content-Length only")
                        if name != b"authorization":
                            kept.append(line + b"\r\n")
                    body = await reader.receive_exactly(length) if length else b""
                    await upstream.send(b"".join([request_line, b"\r\n", self.header, *kept, b"\r\n", body]))
            except (anyio.EndOfStream, anyio.IncompleteRead, anyio.BrokenResourceError, OSError):
                pass
            tg.cancel_scope.cancel()

    @staticmethod
    async def _answers(upstream: SocketStream, client: SocketStream, scope: anyio.CancelScope) -> None:
        try:
            async for chunk in upstream:
                await client.send(chunk)
        except (anyio.BrokenResourceError, OSError):
            pass
        scope.cancel()
