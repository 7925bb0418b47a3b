"""The gateway's fast lane: the hot MCP request (one POST to a sandbox) relayed without ASGI.

An agent's tool call is a POST to ``/sandboxes/<id>/mcp`` with a JSON body and the sandbox's token;
its answer is JSON. The lane (a `envreg.http.fastpath.FastPath`) takes such a request straight off the
socket, checks the same things the gateway checks, writes it to a pooled keep-alive connection to the
environment server, and writes the answer back, all in protocol callbacks: no ASGI scope, no task, no
stream object per call. Anything else (another method or path, a Host that is not loopback, an Origin,
no token or a wrong one, a body over the limit, chunked requests, ``Expect``, HTTP/1.0) leaves the lane
at that request: the connection is handed to uvicorn's protocol and the ASGI gateway answers it and
everything after it on that connection.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import httptools
from uvicorn.protocols.http.httptools_impl import STATUS_LINE

from envreg.http.fastpath import FastPath, FastProtocol, Head
from envreg.http.jsonrpc import jsonrpc_request
from envreg.http.relay import HOP_BY_HOP
from envreg.protocol import GATEWAY_PREFIX, KEEP_ALIVE_SECONDS, UPSTREAM_IDLE_SECONDS
from envreg.runtime.gateway import NOT_FORWARDED, upstream_error_body

logger = logging.getLogger("envreg.gateway")
_PREFIX = GATEWAY_PREFIX.encode()


class Lane(FastPath):
    """The gateway's fast path: sandboxes by id (`lookup`), the body limit, the upstream timeout."""

    def __init__(
        self,
        lookup: Callable[[str], Any],
        max_body: int = 4 << 20,
        timeout: float = 30.0,
        keep_alive: int = KEEP_ALIVE_SECONDS,
    ) -> None:
        super().__init__(max_body, keep_alive)
        self.drop = NOT_FORWARDED
        self.lookup = lookup
        self.timeout = timeout
        self.idle: dict[tuple, list[Upstream]] = defaultdict(list)
        self.waiting: set[Relay] = set()
        """Relays whose answer has not ended, each with its deadline (`Relay.deadline`)."""
        self._sweep: asyncio.TimerHandle | None = None

    def close(self) -> None:
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None
        for conns in self.idle.values():
            for conn in conns:
                conn.close()
        self.idle.clear()

    def begin(self, head: Head, body: bytes) -> Relay | None:
        """The relay of a tool call to a live sandbox that this client holds the token of."""
        path = head.path
        if not path.startswith(_PREFIX) or not path.endswith(b"/mcp") or head.host not in self.hosts:
            return None
        sandbox_id = path[len(_PREFIX) : -4]
        if not sandbox_id or b"/" in sandbox_id or head.authorization is None:
            return None
        sandbox = self.lookup(sandbox_id.decode("ascii", "replace"))
        if sandbox is None or sandbox.ended is not None or not sandbox.token:
            return None
        if not hmac.compare_digest(head.authorization, b"Bearer " + sandbox.token.encode()):
            return None
        upstream = sandbox.upstream
        if upstream is None:
            return None
        request = b"\r\n".join(
            [upstream.post_head, *head.others, b"content-length: %d" % len(body), b"", body]
        )
        key = (upstream.server_id, upstream.host, upstream.port, upstream.socket)
        return Relay(self, sandbox, key, request, head.keep_alive)

    # deadlines: one timer for the lane, not one set and cancelled per call ---------------------------
    def watch(self, relay: Relay, loop: asyncio.AbstractEventLoop) -> None:
        relay.deadline = loop.time() + self.timeout
        self.waiting.add(relay)
        if self._sweep is None:
            self._sweep = loop.call_at(relay.deadline, self._expire, loop)

    def _expire(self, loop: asyncio.AbstractEventLoop) -> None:
        """Time out the relays past their deadline; wake again at the next one."""
        self._sweep = None
        now = loop.time()
        for relay in [r for r in self.waiting if r.deadline <= now]:
            relay.timed_out()
        if self.waiting:
            self._sweep = loop.call_at(min(r.deadline for r in self.waiting), self._expire, loop)

    # upstream connections ----------------------------------------------------------------------
    def take(self, key: tuple, now: float) -> Upstream | None:
        """A pooled connection to `key` that has not idled too long (`now`: the loop's time)."""
        idle = self.idle.get(key)
        while idle:
            conn = idle.pop()
            if not conn.closed and now - conn.idle_since < UPSTREAM_IDLE_SECONDS:
                return conn
            conn.close()
        return None

    def give_back(self, conn: Upstream, now: float) -> None:
        conn.idle_since = now
        self.idle[conn.key].append(conn)


class Relay:
    """One request relayed upstream and its answer relayed back (an `envreg.http.fastpath.Exchange`)."""

    __slots__ = (
        "chunked",
        "client",
        "deadline",
        "head_sent",
        "keep_alive",
        "key",
        "lane",
        "request",
        "retried",
        "reused",
        "sandbox",
        "upstream",
    )

    def __init__(self, lane: Lane, sandbox: Any, key: tuple, request: bytes, keep_alive: bool) -> None:
        self.lane = lane
        self.client: FastProtocol = None  # type: ignore[assignment]
        self.sandbox = sandbox
        self.key = key
        self.request = request
        self.keep_alive = keep_alive
        self.upstream: Upstream | None = None
        self.head_sent = False
        self.chunked = False
        self.retried = False
        self.reused = False
        self.deadline = 0.0

    def start(self, conn: FastProtocol) -> None:
        self.client = conn
        lane = self.lane
        lane.watch(self, conn.loop)
        upstream = lane.take(self.key, conn.loop.time())
        if upstream is None:
            conn.loop.create_task(self.connect())
        else:
            self.send(upstream, reused=True)

    async def connect(self) -> None:
        _, host, port, path = self.key
        loop = self.client.loop
        try:
            if path is None:
                _, conn = await loop.create_connection(lambda: Upstream(self.key), host, port)
            else:
                _, conn = await loop.create_unix_connection(lambda: Upstream(self.key), path)
        except OSError as exc:
            self.fail(502, f"sandbox {self.sandbox.id} did not answer: {exc}")
            return
        if self.client.transport.is_closing() or self not in self.lane.waiting:  # timed out meanwhile
            conn.close()
            return
        self.send(conn, reused=False)

    def send(self, conn: Upstream, reused: bool) -> None:
        self.upstream = conn
        self.reused = reused
        conn.exchange = self
        conn.transport.write(self.request)

    # from the upstream connection --------------------------------------------------------------
    def head(self, status: int, headers: list[tuple[bytes, bytes]], length: int | None) -> bytes:
        """The answer's head for the client (hop-by-hop headers dropped; a stream is re-chunked)."""
        out = [STATUS_LINE[status] if 100 <= status < 600 else b"HTTP/1.1 %d \r\n" % status]
        for name, value in headers:
            if name not in HOP_BY_HOP:
                out.append(name + b": " + value + b"\r\n")
        self.chunked = length is None
        if self.chunked:
            out.append(b"transfer-encoding: chunked\r\n")
        out.append(self.lane.keep_alive_header if self.keep_alive else b"connection: close\r\n")
        out.append(b"\r\n")
        self.head_sent = True
        return b"".join(out)

    def answer(self, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
        """A complete answer of known length: one write."""
        self.client.write(self.head(status, headers, len(body)) + body)

    def stream_head(self, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        self.client.write(self.head(status, headers, None))

    def body(self, data: bytes) -> None:
        if data:
            self.client.write(b"%x\r\n%b\r\n" % (len(data), data))

    def done(self, upstream_keep_alive: bool) -> None:
        if self.chunked:
            self.client.write(b"0\r\n\r\n")
        self._release(upstream_keep_alive)
        self.client.finished(self.keep_alive)

    def broke(self, exc: Exception | None) -> None:
        """The upstream connection closed before the answer was complete."""
        self.upstream = None
        if not self.head_sent and self.reused and not self.retried:
            self.retried = True  # a pooled connection the server had dropped: once more on a new one
            self.client.loop.create_task(self.connect())
            return
        if self.head_sent:
            self._unwatch()
            self.client.finished(False)
        else:
            self.fail(502, f"sandbox {self.sandbox.id} did not answer: {exc or 'connection closed'}")

    # the client side ---------------------------------------------------------------------------
    def timed_out(self) -> None:
        self._unwatch()
        if self.upstream is not None:
            self.upstream.close()
            self.upstream = None
        if self.head_sent:
            self.client.finished(False)
        else:
            timeout = self.lane.timeout
            self.fail(
                504, f"sandbox {self.sandbox.id}: no answer in {timeout:g} s; the call may still complete"
            )

    def fail(self, status: int, message: str) -> None:
        """A 502 / 504, as a JSON-RPC error when the request was JSON-RPC (`gateway.error_body`)."""
        self._unwatch()
        call = jsonrpc_request(self.request.partition(b"\r\n\r\n")[2])
        body = upstream_error_body(status, message, call, self.sandbox.id)
        self.client.respond(status, body, b"application/json", self.keep_alive)
        self.client.finished(self.keep_alive)

    def abandon(self) -> None:
        """The client left: drop the upstream connection (its answer is not wanted any more)."""
        self._unwatch()
        if self.upstream is not None:
            self.upstream.close()
            self.upstream = None

    def pause(self) -> None:
        if self.upstream is not None:
            self.upstream.transport.pause_reading()

    def resume(self) -> None:
        if self.upstream is not None and not self.upstream.closed:
            self.upstream.transport.resume_reading()

    def _release(self, reusable: bool) -> None:
        self._unwatch()
        conn, self.upstream = self.upstream, None
        if conn is None:
            return
        conn.exchange = None
        if reusable and not conn.closed:
            self.lane.give_back(conn, self.client.loop.time())
        else:
            conn.close()

    def _unwatch(self) -> None:
        self.lane.waiting.discard(self)


class Upstream(asyncio.Protocol):
    """A keep-alive connection to one environment server; httptools parses its answers."""

    __slots__ = (
        "_body",
        "_headers",
        "_length",
        "closed",
        "exchange",
        "idle_since",
        "key",
        "parser",
        "transport",
    )

    def __init__(self, key: tuple) -> None:
        self.key = key
        self.exchange: Relay | None = None
        self.closed = False
        self.idle_since = 0.0
        self.transport: asyncio.Transport = None  # type: ignore[assignment]
        self.parser = httptools.HttpResponseParser(self)
        self._headers: list[tuple[bytes, bytes]] = []
        self._length: int | None = None
        self._body: list[bytes] = []

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if self.exchange is None:  # an answer nobody asked for: this connection is not usable
            self.close()
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            exchange = self.exchange
            self.close()
            exchange.broke(exc)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        exchange, self.exchange = self.exchange, None
        if exchange is not None:
            exchange.broke(exc)

    def close(self) -> None:
        self.closed = True
        self.exchange = None
        if self.transport is not None:
            self.transport.close()

    # httptools callbacks ------------------------------------------------------------------------
    def on_message_begin(self) -> None:
        self._headers, self._length, self._body = [], None, []

    def on_header(self, name: bytes, value: bytes) -> None:
        name = name.lower()
        if name == b"content-length":
            self._length = int(value)
        self._headers.append((name, value))

    def on_headers_complete(self) -> None:
        if self._length is None and self.exchange is not None:  # a stream: relay as it comes
            self.exchange.stream_head(self.parser.get_status_code(), self._headers)

    def on_body(self, body: bytes) -> None:
        if self.exchange is None:
            return
        if self._length is None:
            self.exchange.body(body)
        else:
            self._body.append(body)

    def on_message_complete(self) -> None:
        exchange = self.exchange
        if exchange is None:
            return
        if self._length is not None:
            exchange.answer(self.parser.get_status_code(), self._headers, b"".join(self._body))
        exchange.done(self.parser.should_keep_alive())
