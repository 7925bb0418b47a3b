"""The gateway's fast lane: the hot MCP request (one POST to a sandbox) relayed without ASGI.

An agent's tool call is a POST to ``/sandboxes/<id>/mcp`` with a JSON body and the sandbox's token;
its answer is JSON. The lane takes such a request straight off the socket (uvicorn's own HTTP
protocol, subclassed), checks the same things the gateway checks, writes it to a pooled keep-alive
connection to the environment server, and writes the answer back, all in protocol callbacks: no
ASGI scope, no task, no stream object per call. Anything else (another method or path, a Host that
is not loopback, an Origin, no token or a wrong one, a body over the limit, chunked requests,
``Expect``, HTTP/1.0) leaves the lane at that request: the connection is handed to uvicorn's
protocol and the ASGI gateway answers it and everything after it on that connection.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import httptools
import uvicorn
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from envreg.http.jsonrpc import jsonrpc_request
from envreg.http.loopback import LOOPBACK_HOSTS
from envreg.http.relay import HOP_BY_HOP
from envreg.protocol import GATEWAY_PREFIX, KEEP_ALIVE_SECONDS, UPSTREAM_IDLE_SECONDS
from envreg.runtime.gateway import GENERATION, NOT_FORWARDED, upstream_error_body

logger = logging.getLogger("envreg.gateway")

MAX_HEAD = 64 * 1024
_LEAVE = frozenset({b"transfer-encoding", b"expect", b"upgrade", b"origin"})


UVICORN_VERIFIED = ((0, 34), (0, 54))
"""The uvicorn releases (minor versions, both included) whose private `HttpToolsProtocol` the lane was tested
against (`tests/test_fastlane_contract.py` checks the surface it uses); outside them no gateway uses the lane."""


def lane_supported(version: str | None = None) -> bool:
    """Whether the lane may subclass uvicorn's HTTP protocol (`UVICORN_VERIFIED`; the installed one by default)."""
    try:
        release = tuple(int(part) for part in (version or uvicorn.__version__).split(".")[:2])
    except ValueError:
        return False
    low, high = UVICORN_VERIFIED
    return len(release) == 2 and low <= release <= high


def fast_lane(lookup: Callable[[str], Any], max_body: int, timeout: float, keep_alive: int) -> Lane | None:
    """A gateway's lane, or None (and a warning saying so) on a uvicorn it was not verified with."""
    if lane_supported():
        return Lane(lookup, max_body, timeout, keep_alive)
    (low, high), found = UVICORN_VERIFIED, uvicorn.__version__
    logger.warning(
        "uvicorn %s: the gateway's fast lane is verified on uvicorn %d.%d to %d.%d only; every call goes "
        "through ASGI (about 0.2 ms more per call). Install a verified uvicorn for the lane.",
        found,
        *low,
        *high,
    )
    return None


class Lane:
    """What the lane needs from the gateway: sandboxes by id, the body limit, the upstream timeout."""

    def __init__(
        self,
        lookup: Callable[[str], Any],
        max_body: int = 4 << 20,
        timeout: float = 30.0,
        keep_alive: int = KEEP_ALIVE_SECONDS,
    ) -> None:
        self.lookup = lookup
        self.max_body = max_body
        self.timeout = timeout
        self.keep_alive_header = b"keep-alive: timeout=%d\r\n" % keep_alive
        """What answers say of an idle connection's life (uvicorn's `timeout_keep_alive` is its end)."""
        self.hosts: tuple[bytes, ...] = ()
        self.idle: dict[tuple, list[Upstream]] = defaultdict(list)
        self.calls = 0

    def bind(self, port: int) -> None:
        """Accept Host headers naming this port on a loopback name (the gateway's default rule)."""
        self.hosts = tuple(f"{h}:{port}".encode() for h in LOOPBACK_HOSTS)

    def protocol(self) -> type[HttpToolsProtocol]:
        """uvicorn's HTTP protocol class with this lane in front (give it to `uvicorn.Config(http=...)`)."""
        return type("GatewayLaneProtocol", (LaneProtocol,), {"lane": self})

    def close(self) -> None:
        for conns in self.idle.values():
            for conn in conns:
                conn.close()
        self.idle.clear()

    # a request off the socket ------------------------------------------------------------------
    def parse(self, head: bytes) -> tuple[Any, bytes, list[tuple[bytes, bytes]], int, bool] | None:
        """(sandbox, target, forwarded headers, body length, keep-alive) when the lane takes it."""
        lines = head.split(b"\r\n")
        parts = lines[0].split(b" ")
        if len(parts) != 3 or parts[0] != b"POST" or parts[2] != b"HTTP/1.1":
            return None
        path = parts[1]
        prefix = GATEWAY_PREFIX.encode()
        if not path.startswith(prefix) or not path.endswith(b"/mcp") or b"%" in path or b"?" in path:
            return None
        sandbox_id = path[len(prefix) : -4]
        if not sandbox_id or b"/" in sandbox_id:
            return None
        headers: list[tuple[bytes, bytes]] = []
        host = auth = length = None
        keep_alive = True
        for line in lines[1:]:
            name, sep, value = line.partition(b":")
            if not sep or not name or name != name.strip():
                return None
            name, value = name.lower(), value.strip(b" \t")
            if name in _LEAVE:
                return None
            if name == b"host":
                if host is not None:
                    return None
                host = value
            elif name == b"authorization":
                if auth is not None:
                    return None
                auth = value
            elif name == b"content-length":
                if length is not None or not value.isdigit():
                    return None
                length = int(value)
            elif name == b"connection":
                keep_alive = b"close" not in value.lower()
            if name not in NOT_FORWARDED:
                headers.append((name, value))
        if host not in self.hosts or auth is None or length is None or length > self.max_body:
            return None
        sandbox = self.lookup(sandbox_id.decode("ascii", "replace"))
        if sandbox is None or sandbox.ended is not None or not sandbox.token:
            return None
        if not hmac.compare_digest(auth, b"Bearer " + sandbox.token.encode()):
            return None
        upstream = sandbox.upstream
        if upstream is None:
            return None
        if upstream.token:
            headers.append((b"authorization", b"Bearer " + upstream.token.encode()))
        if upstream.generation is not None:
            headers.append((GENERATION, str(upstream.generation).encode()))
        return sandbox, upstream, headers, length, keep_alive

    # upstream connections ----------------------------------------------------------------------
    def take(self, key: tuple) -> Upstream | None:
        idle = self.idle.get(key)
        now = asyncio.get_running_loop().time()
        while idle:
            conn = idle.pop()
            if not conn.closed and now - conn.idle_since < UPSTREAM_IDLE_SECONDS:
                return conn
            conn.close()
        return None

    def give_back(self, conn: Upstream) -> None:
        conn.idle_since = asyncio.get_running_loop().time()
        self.idle[conn.key].append(conn)


class LaneProtocol(HttpToolsProtocol):
    """uvicorn's HTTP/1.1 protocol with the lane in front; it leaves the lane at the first request the
    lane does not take, and from then on uvicorn parses the connection and the ASGI gateway answers."""

    lane: Lane

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._in_lane = True
        self._buffer = bytearray()
        self._exchange: Exchange | None = None
        self._closing = False
        if not self.lane.hosts and self.server:
            self.lane.bind(self.server[1])  # pyright: ignore[reportArgumentType]

    def data_received(self, data: bytes) -> None:
        if not self._in_lane:
            super().data_received(data)
            return
        self._unset_keepalive_if_required()
        self._buffer += data
        if self._exchange is None:
            self._next()

    def _next(self) -> None:
        buffer = self._buffer
        end = buffer.find(b"\r\n\r\n")
        if end < 0:
            if len(buffer) > MAX_HEAD:
                self._leave()
            return
        taken = self.lane.parse(bytes(buffer[:end]))
        if taken is None:
            self._leave()
            return
        sandbox, upstream, headers, length, keep_alive = taken
        total = end + 4 + length
        if len(buffer) < total:
            return
        body = bytes(buffer[end + 4 : total])
        del buffer[:total]
        target = upstream.path.encode()  # pyright: ignore[reportAttributeAccessIssue]
        request = b"".join(
            [
                b"POST ",
                target,
                b" HTTP/1.1\r\nhost: ",
                f"{upstream.host}:{upstream.port}".encode(),  # pyright: ignore[reportAttributeAccessIssue]
                b"\r\ncontent-length: ",
                str(len(body)).encode(),
                b"\r\n",
                *(k + b": " + v + b"\r\n" for k, v in headers),
                b"\r\n",
                body,
            ]
        )
        self.lane.calls += 1
        self._exchange = Exchange(self, sandbox, (upstream.server_id, upstream.host, upstream.port), request)  # pyright: ignore[reportAttributeAccessIssue]
        self._exchange.keep_alive = keep_alive
        self._exchange.start()

    def _leave(self) -> None:
        """Hand the connection to uvicorn's parser, from the request that the lane did not take on."""
        self._in_lane = False
        data, self._buffer = bytes(self._buffer), bytearray()
        super().data_received(data)

    # the exchange calls these ------------------------------------------------------------------
    def write(self, data: bytes) -> None:
        if not self.transport.is_closing():
            self.transport.write(data)

    def finished(self, keep_alive: bool) -> None:
        self._exchange = None
        self.server_state.total_requests += 1
        if not keep_alive or self._closing or self.transport.is_closing():
            self.transport.close()
            return
        if self._buffer:
            self._next()
        else:
            self.timeout_keep_alive_task = self.loop.call_later(
                self.timeout_keep_alive, self.timeout_keep_alive_handler
            )

    def connection_lost(self, exc: Exception | None) -> None:
        if self._exchange is not None:
            self._exchange.abandon()
            self._exchange = None
        super().connection_lost(exc)

    def shutdown(self) -> None:
        if not self._in_lane:
            super().shutdown()
        elif self._exchange is None:
            self.transport.close()
        else:
            self._closing = True

    def pause_writing(self) -> None:
        super().pause_writing()
        if self._exchange is not None:
            self._exchange.pause()

    def resume_writing(self) -> None:
        super().resume_writing()
        if self._exchange is not None:
            self._exchange.resume()


class Exchange:
    """One request relayed upstream and its answer relayed back."""

    def __init__(self, client: LaneProtocol, sandbox: Any, key: tuple, request: bytes) -> None:
        self.client = client
        self.sandbox = sandbox
        self.key = key
        self.request = request
        self.keep_alive = True
        self.upstream: Upstream | None = None
        self.head_sent = False
        self.chunked = False
        self.retried = False
        self.reused = False
        self.timer: asyncio.TimerHandle | None = None

    def start(self) -> None:
        lane = self.client.lane
        self.timer = self.client.loop.call_later(lane.timeout, self.timed_out)
        conn = lane.take(self.key)
        if conn is None:
            self.client.loop.create_task(self.connect())
        else:
            self.send(conn, reused=True)

    async def connect(self) -> None:
        _, host, port = self.key
        try:
            _, conn = await self.client.loop.create_connection(lambda: Upstream(self.key), host, port)
        except OSError as exc:
            self.fail(502, f"sandbox {self.sandbox.id} did not answer: {exc}")
            return
        if self.client.transport.is_closing() or self.timer is None:
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
        out.append(self.client.lane.keep_alive_header if self.keep_alive else b"connection: close\r\n")
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
            self._stop_timer()
            self.client.finished(False)
        else:
            self.fail(502, f"sandbox {self.sandbox.id} did not answer: {exc or 'connection closed'}")

    # the client side ---------------------------------------------------------------------------
    def timed_out(self) -> None:
        self.timer = None
        if self.upstream is not None:
            self.upstream.close()
            self.upstream = None
        if self.head_sent:
            self.client.finished(False)
        else:
            timeout = self.client.lane.timeout
            self.fail(
                504, f"sandbox {self.sandbox.id}: no answer in {timeout:g} s; the call may still complete"
            )

    def fail(self, status: int, message: str) -> None:
        """A 502 / 504, as a JSON-RPC error when the request was JSON-RPC (`gateway.error_body`)."""
        self._stop_timer()
        call = jsonrpc_request(self.request.partition(b"\r\n\r\n")[2])
        body = upstream_error_body(status, message, call, self.sandbox.id)
        self.client.write(
            STATUS_LINE[status]
            + b"content-type: application/json\r\ncontent-length: "
            + str(len(body)).encode()
            + b"\r\n\r\n"
            + body
        )
        self.client.finished(self.keep_alive)

    def abandon(self) -> None:
        """The client left: drop the upstream connection (its answer is not wanted any more)."""
        self._stop_timer()
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
        self._stop_timer()
        conn, self.upstream = self.upstream, None
        if conn is None:
            return
        conn.exchange = None
        if reusable and not conn.closed:
            self.client.lane.give_back(conn)
        else:
            conn.close()

    def _stop_timer(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None


class Upstream(asyncio.Protocol):
    """A keep-alive connection to one environment server; httptools parses its answers."""

    def __init__(self, key: tuple) -> None:
        self.key = key
        self.exchange: Exchange | None = None
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
