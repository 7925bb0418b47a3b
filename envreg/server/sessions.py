"""Sessions of the 2025-11-25 era: capped per instance and per server, sized to the container's memory.

The `mcp` SDK's session manager keeps a session (about 40 KB) until its client DELETEs it or it has had
no request in flight (no call, no open event stream) for `idle_timeout`; the TypeScript SDKs and the
Inspector never DELETE. `SessionGate` stands in front of the manager and holds each instance (a
sandbox) to `max_per_instance` open sessions and the server to `max_sessions`: opening one more ends the
instance's oldest idle session or, at the server's cap, the oldest idle one of the instance that holds
the most, so a sandbox that floods sessions ends its own, never a co-tenant's. A client that uses a
session that was ended gets a 404 (the status the spec gives an unknown session) whose JSON-RPC error
says why (evicted, expired, its instance deleted) and to initialize a new one.

It also answers what the SDK's transport would answer unreadably: a batch or a body that is no
JSON-RPC message is a -32600 (not a -32602 carrying a validation dump), and an error to a request
without a session never carries the id of a session that was not kept.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from envreg.errors import BadRequest
from envreg.http.asgi import BodyTooLarge, read_body, replay, send_bytes, send_error
from envreg.http.jsonrpc import INTERNAL_ERROR
from envreg.protocol import SESSION_IDLE_TIMEOUT
from envreg.server.instances import instance_id_from_path

SESSION_BYTES = 48 * 1024
"""Memory budgeted per open session: 38.6 KiB measured in a container (`bench/bench_sessions.py`), and headroom."""
MEMORY_SHARE = 4
"""Open sessions may take a quarter of the memory limit; the rest is the server's and its instances'."""
PER_INSTANCE_SHARE = 8
"""One instance may hold an eighth of its server's sessions."""
MAX_SESSIONS = 10_000
"""The most sessions per server (the SDK's own default), for a server with a lot of memory."""
ENDED_KEPT = 4096
"""Ended sessions remembered, so that a client using one is told why it ended."""
logger = logging.getLogger("envreg.server")

SESSION_HEADER = b"mcp-session-id"
VERSION_HEADER = b"mcp-protocol-version"
REINITIALIZE = "initialize a new session (POST an initialize request without Mcp-Session-Id)"
BATCH = (
    "JSON-RPC batches are not accepted: send one message per request (protocol 2025-11-25 has no "
    "batching; 2025-06-18 removed it)"
)
NOT_A_MESSAGE = (
    'not a JSON-RPC 2.0 message: send an object with "jsonrpc": "2.0" and either "method" (a request, '
    'with an "id", or a notification) or an "id" with "result" or "error" (a response)'
)


def memory_limit(cgroup: Path = Path("/sys/fs/cgroup")) -> int:
    """This process's memory limit in bytes: its cgroup's (v2 ``memory.max``, v1
    ``memory/memory.limit_in_bytes``, as a container sees them) or, without one, the machine's memory."""
    physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for name in ("memory.max", "memory/memory.limit_in_bytes"):
        try:
            text = (cgroup / name).read_text().strip()
        except OSError:
            continue
        return min(int(text), physical) if text.isdigit() else physical
    return physical


@dataclass(frozen=True)
class SessionLimits:
    """How many sessions a server keeps open, and for how long without a request."""

    max_sessions: int
    max_per_instance: int
    idle_timeout: float = SESSION_IDLE_TIMEOUT
    memory: int | None = None
    """The memory limit they were sized from, in bytes."""

    @classmethod
    def for_memory(
        cls,
        memory: int,
        *,
        idle_timeout: float = SESSION_IDLE_TIMEOUT,
        max_sessions: int | None = None,
        max_per_instance: int | None = None,
    ) -> SessionLimits:
        """A quarter of `memory` at `SESSION_BYTES` each (16 to 10,000), an eighth of that per instance
        (at least 4); a 256 MiB container keeps 1,365 sessions, 170 per instance."""
        if max_sessions is None:
            max_sessions = max(16, min(MAX_SESSIONS, memory // MEMORY_SHARE // SESSION_BYTES))
        if max_per_instance is None:
            max_per_instance = max(4, max_sessions // PER_INSTANCE_SHARE)
        if max_sessions < 1 or max_per_instance < 1 or not 0 < idle_timeout < float("inf"):
            raise BadRequest(
                f"session limits must be positive: {max_sessions} sessions, {max_per_instance} per instance, "
                f"an idle timeout of {idle_timeout:g} s",
                "give --max-sessions, --max-sessions-per-instance and --session-idle-timeout values above 0, "
                "or leave them out (sized to the memory limit, 60 s)",
            )
        return cls(max_sessions, min(max_per_instance, max_sessions), idle_timeout, memory)

    def stats(self, open_sessions: int = 0, evicted: int = 0, expired: int = 0) -> dict[str, Any]:
        """What `/healthz` reports under "sessions"."""
        return {
            "open": open_sessions,
            "max": self.max_sessions,
            "max_per_instance": self.max_per_instance,
            "idle_timeout": self.idle_timeout,
            "memory_limit": self.memory,
            "evicted": evicted,
            "expired": expired,
        }

    @classmethod
    def detect(cls, **overrides: Any) -> SessionLimits:
        """Sized to this process's memory limit (`memory_limit`); keyword arguments override."""
        return cls.for_memory(memory_limit(), **{k: v for k, v in overrides.items() if v is not None})


@dataclass(eq=False)
class _Session:
    id: str
    instance: str
    last: float
    in_flight: int = 0


@dataclass
class _Ended:
    """Why sessions ended, for the last `ENDED_KEPT` of them."""

    reasons: OrderedDict[str, str] = field(default_factory=OrderedDict)

    def add(self, session_id: str, reason: str) -> None:
        self.reasons[session_id] = reason
        if len(self.reasons) > ENDED_KEPT:
            self.reasons.popitem(last=False)

    def get(self, session_id: str) -> str | None:
        return self.reasons.get(session_id)


class SessionGate:
    """ASGI middleware in front of the SDK's `StreamableHTTPSessionManager` app (see the module doc).

    Requests of the sessionless era (an ``Mcp-Protocol-Version`` header not in `handshake_versions`)
    pass straight through. `end_instance` ends the sessions of a deleted instance.
    """

    def __init__(
        self,
        app: ASGIApp,
        limits: SessionLimits,
        *,
        max_body: int,
        handshake_versions: tuple[str, ...],
        security: Any = None,
    ) -> None:
        from mcp_types import jsonrpc_message_adapter

        self.app = app
        self.limits = limits
        self.max_body = max_body
        self.security = security
        """The SDK's `TransportSecurityMiddleware`: Host and Origin are checked before anything is answered."""
        self._adapter = jsonrpc_message_adapter
        self._handshake = frozenset(v.encode() for v in handshake_versions)
        self._sessions: dict[str, _Session] = {}
        self._by_instance: dict[str, OrderedDict[str, _Session]] = {}
        self._pending: Counter[str] = Counter()
        self._ended = _Ended()
        self._task_group: anyio.abc.TaskGroup | None = None
        self.evicted = 0
        self.expired = 0

    def bind(self, task_group: anyio.abc.TaskGroup) -> None:
        """Where the sessions of deleted instances are ended (in the background)."""
        self._task_group = task_group

    def stats(self) -> dict[str, Any]:
        self._prune(time.monotonic())
        return self.limits.stats(len(self._sessions), self.evicted, self.expired)

    def open_sessions(self, instance_id: str) -> int:
        return len(self._by_instance.get(instance_id, ()))

    # requests -----------------------------------------------------------------------------------
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        version = _header(scope, VERSION_HEADER)
        if version is not None and version not in self._handshake:
            await self.app(scope, receive, send)
            return
        if self.security is not None:
            from starlette.requests import Request

            refused = await self.security.validate_request(
                Request(scope, receive), is_post=scope["method"] == "POST"
            )
            if refused is not None:
                await refused(scope, receive, send)
                return
        session_id = _header(scope, SESSION_HEADER)
        rid, method = None, None
        if scope["method"] == "POST" and _is_json(scope):
            try:
                body = await read_body(scope, receive, self.max_body)
            except BodyTooLarge:
                message = f"Request body too large: over this server's limit of {self.max_body:,} bytes"
                await send_bytes(send, 413, message.encode(), b"text/plain; charset=utf-8")
                return
            problem, rid, method = self._envelope(body)
            if problem is not None:
                await send_error(send, 400, problem, call=(True, rid))
                return
            receive = replay(body, receive)
        if session_id is None:
            await self._open(scope, receive, send, method == "initialize", rid)
        else:
            await self._use(session_id.decode("latin-1"), scope, receive, send, rid)

    def _envelope(self, body: bytes) -> tuple[str | None, Any, str | None]:
        """(what is wrong with the message, its id, its method); a body that is not JSON is left to the SDK
        (a -32700 parse error)."""
        from pydantic import ValidationError

        try:
            message = json.loads(body)
        except (ValueError, RecursionError):
            return None, None, None
        if isinstance(message, list):
            return BATCH, None, None
        try:
            parsed = self._adapter.validate_python(message, by_name=False)
        except ValidationError:
            rid = message.get("id") if isinstance(message, dict) else None
            return NOT_A_MESSAGE, rid if isinstance(rid, (str, int)) else None, None
        return None, getattr(parsed, "id", None), getattr(parsed, "method", None)

    async def _open(self, scope: Scope, receive: Receive, send: Send, initialize: bool, rid: Any) -> None:
        """A request without a session: an initialize opens one (within the caps, which only an initialize
        is let to enforce: any other request here fails), and an error never names the session it did not keep."""
        instance = instance_id_from_path(scope["path"]) or ""
        if initialize:
            refused = await self._admit(instance)
            if refused is not None:
                await send_error(send, 503, refused, call=(True, rid), code=INTERNAL_ERROR)
                return
        session: _Session | None = None

        async def opening(message: Message) -> None:
            nonlocal session
            if message["type"] == "http.response.start":
                headers = message.get("headers", [])
                opened = next((v for k, v in headers if k.lower() == SESSION_HEADER), None)
                if message["status"] >= 400:  # the SDK did not keep it
                    message = {
                        **message,
                        "headers": [(k, v) for k, v in headers if k.lower() != SESSION_HEADER],
                    }
                elif opened is not None:
                    session = self._add(opened.decode("latin-1"), instance)
                    session.in_flight += 1
            await send(message)

        try:
            await self.app(scope, receive, opening)
        finally:
            if initialize:
                self._pending[instance] -= 1
            if session is not None:
                self._done(session)

    async def _use(self, session_id: str, scope: Scope, receive: Receive, send: Send, rid: Any) -> None:
        session = self._sessions.get(session_id)
        if session is not None and self._is_expired(session, time.monotonic()):
            self._end(session, "expired")
            session = None
        if session is None:
            await send_error(send, 404, self._gone(session_id), call=(True, rid))
            return
        session.in_flight += 1
        self._touch(session)
        status = 0

        async def watch(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, watch)
        finally:
            self._done(session)
            if status == 404 or (scope["method"] == "DELETE" and 200 <= status < 300):
                self._end(session, "deleted" if scope["method"] == "DELETE" else "expired")

    def _gone(self, session_id: str) -> str:
        shown = session_id[:64]
        reason = self._ended.get(session_id)
        limits = self.limits
        if reason == "evicted":
            return (
                f"session {shown} was evicted: its instance held its maximum of {limits.max_per_instance} "
                f"open sessions and this was the oldest idle one; {REINITIALIZE}, and end sessions you no "
                "longer need with DELETE"
            )
        if reason == "evicted-server":
            return (
                f"session {shown} was evicted: this server held its maximum of {limits.max_sessions} open "
                f"sessions, and this was the oldest idle one of the instance holding the most; {REINITIALIZE}"
            )
        if reason == "expired":
            return (
                f"session {shown} expired after {limits.idle_timeout:g} s without a request; {REINITIALIZE}"
            )
        if reason == "deleted":
            return f"session {shown} was ended by a DELETE; {REINITIALIZE}"
        if reason == "instance":
            return f"session {shown} ended with its instance, which was deleted"
        return f"no session {shown} on this server: it ended long ago or never existed; {REINITIALIZE}"

    # bookkeeping --------------------------------------------------------------------------------
    async def _admit(self, instance: str) -> str | None:
        """Make room for one more session of `instance` (ending idle ones); a reason when there is none."""
        now = time.monotonic()
        mine = self._by_instance.get(instance, OrderedDict())
        victims: list[tuple[_Session, str]] = []
        if len(mine) + self._pending[instance] >= self.limits.max_per_instance:
            self._prune(now, mine)
            if len(mine) + self._pending[instance] >= self.limits.max_per_instance:
                victim = _oldest_idle(mine)
                if victim is None:
                    return (
                        f"this instance holds its maximum of {self.limits.max_per_instance} open sessions "
                        "and every one is in use (a request or an event stream open): end one with DELETE, "
                        "then initialize again"
                    )
                victims.append((victim, "evicted"))
        pending = sum(self._pending.values())
        if len(self._sessions) - len(victims) + pending >= self.limits.max_sessions:
            self._prune(now)
            if len(self._sessions) - len(victims) + pending >= self.limits.max_sessions:
                victim = self._heaviest_idle(exclude={v.id for v, _ in victims})
                if victim is None:
                    return (
                        f"this server holds its maximum of {self.limits.max_sessions} open sessions and "
                        "every one is in use: end sessions with DELETE, then initialize again"
                    )
                victims.append((victim, "evicted-server"))
        self._pending[instance] += 1
        for victim, reason in victims:
            self._end(victim, reason)
        for victim, _ in victims:
            await self._close_upstream(victim.id)
        return None

    def _heaviest_idle(self, exclude: set[str]) -> _Session | None:
        for sessions in sorted(self._by_instance.values(), key=len, reverse=True):
            victim = _oldest_idle(sessions, exclude)
            if victim is not None:
                return victim
        return None

    def _is_expired(self, session: _Session, now: float) -> bool:
        # a little before the SDK's own timer ends it, so that it is this gate that answers, saying why
        idle = self.limits.idle_timeout
        return session.in_flight == 0 and now - session.last >= idle - min(1.0, idle / 10)

    def _prune(self, now: float, sessions: OrderedDict[str, _Session] | None = None) -> None:
        """Forget the sessions the SDK has ended (or is about to) for being idle too long."""
        for group in [sessions] if sessions is not None else list(self._by_instance.values()):
            for session in list(group.values()):  # least recently used first
                if session.in_flight:
                    continue
                if not self._is_expired(session, now):
                    break
                self._end(session, "expired")

    def _add(self, session_id: str, instance: str) -> _Session:
        session = _Session(session_id, instance, time.monotonic())
        self._sessions[session_id] = session
        self._by_instance.setdefault(instance, OrderedDict())[session_id] = session
        return session

    def _touch(self, session: _Session) -> None:
        group = self._by_instance.get(session.instance)
        if group is not None and session.id in group:
            group.move_to_end(session.id)

    def _done(self, session: _Session) -> None:
        session.in_flight -= 1
        session.last = time.monotonic()
        self._touch(session)

    def _end(self, session: _Session, reason: str) -> None:
        if self._sessions.pop(session.id, None) is None:
            return
        group = self._by_instance.get(session.instance)
        if group is not None:
            group.pop(session.id, None)
            if not group:
                del self._by_instance[session.instance]
        self._ended.add(session.id, reason)
        if reason.startswith("evicted"):
            self.evicted += 1
        elif reason == "expired":
            self.expired += 1

    def end_instance(self, instance_id: str) -> None:
        """End every session opened on a deleted instance (their clients are told it was deleted)."""
        group = self._by_instance.get(instance_id)
        if not group:
            return
        ended = list(group.values())
        for session in ended:
            self._end(session, "instance")
        if self._task_group is not None:
            for session in ended:
                self._task_group.start_soon(self._close_upstream, session.id)

    async def _close_upstream(self, session_id: str) -> None:
        """End a session in the SDK the way a client does: a DELETE with its id."""
        scope: dict[str, Any] = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "DELETE",
            "scheme": "http",
            "path": "/mcp",
            "raw_path": b"/mcp",
            "query_string": b"",
            "root_path": "",
            "headers": [(b"host", b"127.0.0.1:1"), (SESSION_HEADER, session_id.encode())],
            "client": None,
            "server": None,
        }

        async def receive() -> Message:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def discard(message: Message) -> None:
            pass

        with anyio.CancelScope(shield=True):
            try:
                await self.app(scope, receive, discard)
            except Exception:  # the session is forgotten here all the same; the SDK's idle timer ends it
                logger.exception("ending session %s", session_id)


def _oldest_idle(sessions: OrderedDict[str, _Session], exclude: set[str] = frozenset()) -> _Session | None:  # type: ignore[assignment]
    return next((s for s in sessions.values() if not s.in_flight and s.id not in exclude), None)


def _header(scope: Scope, name: bytes) -> bytes | None:
    return next((v for k, v in scope["headers"] if k == name), None)


def _is_json(scope: Scope) -> bool:
    content_type = _header(scope, b"content-type") or b""
    return content_type.lower().startswith(b"application/json")
