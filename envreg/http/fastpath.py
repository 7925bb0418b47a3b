"""A fast path in front of uvicorn's HTTP/1.1 protocol: the hot request answered off the socket, no ASGI.

A front's hot request (an MCP ``tools/call``: one POST with a JSON body and a Content-Length) costs an
ASGI scope, a task, two writes and a middleware stack per call under uvicorn. A `FastPath` takes such a
request straight off the socket in protocol callbacks and answers it with one write. Anything else (another
method, HTTP/1.0, chunked bodies, ``Expect``, ``Upgrade``, an ``Origin``, a body over the limit, or a
request the path declines) leaves the fast path at that request: the connection is handed to uvicorn's
protocol, and the front's ASGI app answers it and everything after it on that connection.

Two fronts use it: the gateway (`envreg.runtime.fastlane.Lane`: relays to a sandbox's server) and the
environment server's agent plane (`envreg.server.agent_lane.AgentLane`: the lean path's answers).

The protocol subclasses uvicorn's private `HttpToolsProtocol`: `UVICORN_VERIFIED` names the releases it
was tested with (`tests/test_fastlane_contract.py` checks the surface it uses); outside them `verified`
is False, and the front serves through ASGI.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Protocol

import uvicorn
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from envreg.http.loopback import LOOPBACK_HOSTS

logger = logging.getLogger("envreg.http")

MAX_HEAD = 64 * 1024
LEAVE = frozenset({b"transfer-encoding", b"expect", b"upgrade", b"origin"})
"""Request headers whose requests the fast path leaves to uvicorn."""
_LEAVE, _HOST, _AUTHORIZATION, _LENGTH, _CONNECTION = range(5)
_SPECIAL = {
    b"host": _HOST,
    b"authorization": _AUTHORIZATION,
    b"content-length": _LENGTH,
    b"connection": _CONNECTION,
    **dict.fromkeys(LEAVE, _LEAVE),
}
"""The request headers `parse_head` reads or refuses, by lowercased name."""
UVICORN_VERIFIED = ((0, 34), (0, 55))
"""The uvicorn releases (minor versions, both included) whose private `HttpToolsProtocol` the fast path
was tested against; outside them no front uses it."""


def fast_path_supported(version: str | None = None) -> bool:
    """Whether the fast path may subclass uvicorn's HTTP protocol (the installed uvicorn by default)."""
    try:
        release = tuple(int(part) for part in (version or uvicorn.__version__).split(".")[:2])
    except ValueError:
        return False
    low, high = UVICORN_VERIFIED
    return len(release) == 2 and low <= release <= high


def verified(front: str) -> bool:
    """Whether `front` may use a fast path on the installed uvicorn; a warning naming it when not."""
    if fast_path_supported():
        return True
    (low, high), found = UVICORN_VERIFIED, uvicorn.__version__
    logger.warning(
        "uvicorn %s: the %s's fast path is verified on uvicorn %d.%d to %d.%d only; every call goes "
        "through ASGI (about 0.2 ms more per call). Install a verified uvicorn for the fast path.",
        found,
        front,
        *low,
        *high,
    )
    return False


@dataclass(slots=True)
class Head:
    """A request head the fast path may take: a POST over HTTP/1.1 with one Content-Length."""

    path: bytes
    headers: list[tuple[bytes, bytes]]
    """Every header, names lowercased, values without surrounding whitespace (RFC 9110 5.5), in order."""
    others: list[bytes]
    """The raw lines of the headers that this parse does not read itself (host, authorization,
    content-length, connection) and that `parse_head`'s `drop` does not name: what a relay sends on."""
    host: bytes | None
    authorization: bytes | None
    length: int
    keep_alive: bool


def parse_head(head: bytes, drop: frozenset[bytes] = frozenset()) -> Head | None:
    """The head (without its blank line), or None when uvicorn should parse the request instead.

    `drop`: lowercased names of headers to leave out of `Head.others`."""
    lines = head.split(b"\r\n")
    parts = lines[0].split(b" ")
    if len(parts) != 3 or parts[0] != b"POST" or parts[2] != b"HTTP/1.1":
        return None
    path = parts[1]
    if b"%" in path or b"?" in path:
        return None
    headers: list[tuple[bytes, bytes]] = []
    others: list[bytes] = []
    host = auth = length = None
    keep_alive = True
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if not sep or not name or name != name.strip():
            return None
        name, value = name.lower(), value.strip(b" \t")
        special = _SPECIAL.get(name)
        if special is not None:
            if special == _LEAVE:
                return None
            if special == _HOST:
                if host is not None:
                    return None
                host = value
            elif special == _AUTHORIZATION:
                if auth is not None:
                    return None
                auth = value
            elif special == _LENGTH:
                if length is not None or not value.isdigit():
                    return None
                length = int(value)
            else:
                keep_alive = b"close" not in value.lower()
        elif name not in drop:
            others.append(line)
        headers.append((name, value))
    if length is None:
        return None
    return Head(path, headers, others, host, auth, length, keep_alive)


class Exchange(Protocol):
    """One request the fast path took, answered now or later (then `FastProtocol.finished` is called)."""

    keep_alive: bool

    def start(self, conn: FastProtocol) -> None: ...

    def abandon(self) -> None:
        """The client left before the answer was complete."""

    def pause(self) -> None: ...

    def resume(self) -> None: ...


class Answer:
    """An answer known at once: written in one piece as soon as the exchange starts."""

    def __init__(self, status: int, body: bytes, keep_alive: bool, content_type: bytes = b"application/json"):
        self.status = status
        self.body = body
        self.keep_alive = keep_alive
        self.content_type = content_type

    def start(self, conn: FastProtocol) -> None:
        conn.respond(self.status, self.body, self.content_type, self.keep_alive)
        conn.finished(self.keep_alive)

    def abandon(self) -> None:
        pass

    def pause(self) -> None:
        pass

    def resume(self) -> None:
        pass


class FastPath:
    """What a front answers off the socket: subclasses implement `begin`."""

    def __init__(self, max_body: int, keep_alive: int) -> None:
        self.max_body = max_body
        self.keep_alive_header = b"keep-alive: timeout=%d\r\n" % keep_alive
        """What answers say of an idle connection's life (uvicorn's `timeout_keep_alive` is its end)."""
        self.hosts: tuple[bytes, ...] = ()
        self.drop: frozenset[bytes] = frozenset()
        """Request headers that `begin` does not need in `Head.others`."""
        self.calls = 0
        self._heads: dict[tuple[int, bytes, bool], bytes] = {}
        self._defaults: list[tuple[bytes, bytes]] | None = None

    def answer_head(
        self, status: int, content_type: bytes, keep_alive: bool, defaults: list[tuple[bytes, bytes]]
    ) -> bytes:
        """An answer's head up to its Content-Length value, with uvicorn's `defaults` (date, server); kept
        until uvicorn replaces them (once a second, for the date)."""
        if defaults is not self._defaults:
            self._heads.clear()
            self._defaults = defaults
        key = (status, content_type, keep_alive)
        head = self._heads.get(key)
        if head is None:
            parts = [STATUS_LINE[status], *(name + b": " + value + b"\r\n" for name, value in defaults)]
            parts += [b"content-type: ", content_type, b"\r\n"]
            parts.append(self.keep_alive_header if keep_alive else b"connection: close\r\n")
            head = self._heads[key] = b"".join([*parts, b"content-length: "])
        return head

    def bind(self, port: int) -> None:
        """Host headers naming this port on a loopback name (what the gateway's fast path accepts)."""
        self.hosts = tuple(f"{h}:{port}".encode() for h in LOOPBACK_HOSTS)

    def begin(self, head: Head, body: bytes) -> Exchange | None:
        """The exchange that answers this request, or None to leave it (and the connection) to uvicorn."""
        raise NotImplementedError

    def protocol(self) -> type[FastProtocol]:
        """uvicorn's HTTP protocol class with this path in front (give it to `uvicorn.Config(http=...)`)."""
        return type(f"{type(self).__name__}Protocol", (FastProtocol,), {"path": self})

    def close(self) -> None:
        """Release what the path holds (pooled upstream connections)."""


class FastProtocol(HttpToolsProtocol):
    """uvicorn's HTTP/1.1 protocol with a `FastPath` in front; it leaves the path at the first request the
    path does not take, and from then on uvicorn parses the connection and the ASGI app answers."""

    path: FastPath

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._in_path = True
        self._buffer = bytearray()
        self._exchange: Exchange | None = None
        self._closing = False
        self._taking = False  # inside `_next`: an exchange that finishes at once lets its loop go on
        self._paused = False  # the client reads slower than answers come: take nothing more until it reads
        self._idle_since: float | None = None  # when the last answer ended, while nothing has come since
        if not self.path.hosts and self.server:
            self.path.bind(self.server[1])  # pyright: ignore[reportArgumentType]

    def data_received(self, data: bytes) -> None:
        if not self._in_path:
            super().data_received(data)
            return
        self._idle_since = None  # busy: the keep-alive timer leaves the connection open
        self._buffer += data
        self._next()

    def _next(self) -> None:
        """Take the buffered requests one at a time, each once the one before it is answered."""
        if self._taking:
            return
        self._taking = True
        try:
            while self._in_path and self._exchange is None and not self._paused and self._take():
                pass
        finally:
            self._taking = False

    def _take(self) -> bool:
        """Start the exchange of the next complete request; False when there is none (yet) to start."""
        buffer = self._buffer
        end = buffer.find(b"\r\n\r\n")
        seen = end if end >= 0 else len(buffer)
        if buffer.count(b"\n", 0, seen) != buffer.count(b"\r\n", 0, seen):
            self._leave()  # a line ended by a bare LF: uvicorn's parser reads such heads, the path never would
            return False
        if end < 0:
            if len(buffer) > MAX_HEAD:
                self._leave()
            return False
        head = parse_head(bytes(buffer[:end]), self.path.drop)
        if head is None or head.length > self.path.max_body:
            self._leave()
            return False
        total = end + 4 + head.length
        if len(buffer) < total:
            return False
        exchange = self.path.begin(head, bytes(buffer[end + 4 : total]))
        if exchange is None:
            self._leave()
            return False
        del buffer[:total]
        self.path.calls += 1
        self._exchange = exchange
        exchange.start(self)
        return True

    def _leave(self) -> None:
        """Hand the connection to uvicorn's parser, from the request that the path did not take on."""
        self._in_path = False
        data, self._buffer = bytes(self._buffer), bytearray()
        super().data_received(data)

    # the exchange calls these ------------------------------------------------------------------
    def write(self, data: bytes) -> None:
        if not self.transport.is_closing():
            self.transport.write(data)

    def respond(self, status: int, body: bytes, content_type: bytes, keep_alive: bool) -> None:
        """A whole answer in one write, with uvicorn's own date and server headers."""
        head = self.path.answer_head(status, content_type, keep_alive, self.server_state.default_headers)
        self.write(b"%b%d\r\n\r\n%b" % (head, len(body), body))

    def finished(self, keep_alive: bool) -> None:
        self._exchange = None
        self.server_state.total_requests += 1
        if not keep_alive or self._closing or self.transport.is_closing():
            self.transport.close()
            return
        if self._buffer:
            self._next()
        else:
            self._idle()

    def _idle(self) -> None:
        """Start the keep-alive time: one timer per connection, set again only when it fires early (a
        timer set and cancelled per request costs as much as parsing the request's head)."""
        self._idle_since = self.loop.time()
        if self.timeout_keep_alive_task is None:
            self.timeout_keep_alive_task = self.loop.call_later(self.timeout_keep_alive, self._keep_alive_due)

    def _keep_alive_due(self) -> None:
        self.timeout_keep_alive_task = None
        since = self._idle_since
        if not self._in_path or since is None:
            return  # uvicorn keeps time from here, or a request is under way (its end sets the timer)
        left = since + self.timeout_keep_alive - self.loop.time()
        if left > 0:
            self.timeout_keep_alive_task = self.loop.call_later(left, self._keep_alive_due)
        else:
            self.timeout_keep_alive_handler()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._exchange is not None:
            self._exchange.abandon()
            self._exchange = None
        self._unset_keepalive_if_required()
        super().connection_lost(exc)

    def shutdown(self) -> None:
        if not self._in_path:
            super().shutdown()
        elif self._exchange is None:
            self.transport.close()
        else:
            self._closing = True

    def pause_writing(self) -> None:
        super().pause_writing()
        if self._in_path:
            self._paused = True
            self.transport.pause_reading()
        if self._exchange is not None:
            self._exchange.pause()

    def resume_writing(self) -> None:
        super().resume_writing()
        if self._exchange is not None:
            self._exchange.resume()
        if self._in_path and self._paused:
            self._paused = False
            self.transport.resume_reading()
            self._next()
