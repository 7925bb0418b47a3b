"""The gateway: one host port that routes ``/sandboxes/<id>/mcp`` to the right instance, per-sandbox token.

Event streams (the session era's GET, any answer without a Content-Length) are relayed while both
ends are there: the upstream stream is closed as soon as the client leaves, its sandbox ends or the
gateway shuts down, so an environment server never holds a stream nobody reads.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Iterable

import anyio
import httpx2
from starlette.types import Receive, Scope, Send

from envreg.errors import UpstreamError, UpstreamTimeout
from envreg.http.access import shorten
from envreg.http.asgi import BodyTooLarge, read_body, send_bytes, send_error
from envreg.http.auth import bearer_matches
from envreg.http.errors import error_body
from envreg.http.jsonrpc import INTERNAL_ERROR, Call, mcp_call
from envreg.http.relay import HOP_BY_HOP, relay, relayed_headers
from envreg.protocol import GATEWAY_PREFIX, GENERATION_HEADER
from envreg.runtime.backends.base import Upstream
from envreg.runtime.sandbox import Sandbox
from envreg.runtime.upstream import READ_TIMEOUT, UpstreamPool

logger = logging.getLogger("envreg.gateway")

GENERATION = GENERATION_HEADER.encode()
# Host and Origin were checked here (`AccessGuard`); the environment server sees the gateway as its client
NOT_FORWARDED = frozenset(HOP_BY_HOP) | {
    b"host",
    b"authorization",
    b"content-length",
    b"origin",
    GENERATION,  # the gateway's to set: a client cannot pick the process it reaches
}
_BROKEN = (httpx2.TransportError, UpstreamError, anyio.EndOfStream, anyio.IncompleteRead, OSError)
PREFIX = GATEWAY_PREFIX
HOW_TO_AUTHENTICATE = (
    "missing or wrong sandbox token: send `Authorization: Bearer <token>` with this sandbox's own token "
    "(`sb.token` in Python, printed by `envreg run`, `token` in the `POST /v1/sandboxes` response)"
)
ENDED_POLL_SECONDS = 1.0


def sandbox_id_from_path(path: str) -> str | None:
    if not path.startswith(PREFIX):
        return None
    parts = path[len(PREFIX) :].rstrip("/").split("/")
    return parts[0] if len(parts) == 2 and parts[1] == "mcp" and parts[0] else None


def upstream_error_body(status: int, message: str, call: Call, sandbox_id: str) -> bytes:
    """The answer of a 502 / 504: the sandbox's environment server did not answer (in time)."""
    data = {"sandbox": sandbox_id, "state": "no answer" if status == 504 else "unreachable"}
    return error_body(message, call, INTERNAL_ERROR, data)


def _reason(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


class Gateway:
    """Streams MCP traffic to sandboxes; 401 without the sandbox's token, 404 once it has ended.

    `lookup` finds a live sandbox by id; `ended` says why an id that is no longer live ended (its
    lease expired, it was deleted); `timeout` bounds the wait for an environment server's answer
    (a 504 after it). Host and Origin are checked in front of it, by `envreg.http.access.AccessGuard`.
    """

    def __init__(
        self,
        lookup: Callable[[str], Sandbox | None],
        http: httpx2.AsyncClient,
        max_body: int = 4 << 20,
        *,
        ended: Callable[[str], str | None] | None = None,
        timeout: float = READ_TIMEOUT,
    ):
        self.lookup = lookup
        self.ended = ended or (lambda _: None)
        self.http = http
        self.max_body = max_body
        self.timeout = timeout
        self.upstream = UpstreamPool(timeout)
        self._streams: set[anyio.CancelScope] = set()
        self._closing = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        sandbox_id = sandbox_id_from_path(scope["path"])
        sandbox = self.lookup(sandbox_id) if sandbox_id else None
        upstream = sandbox.upstream if sandbox is not None and sandbox.ended is None else None
        if sandbox is None or upstream is None:
            message, state = self._not_found(scope["path"], sandbox_id, sandbox)
            data = {"sandbox": shorten(sandbox_id), "state": state} if sandbox_id else None
            await send_error(send, 404, message, call=await self._call(scope, receive), data=data)
            return
        if not sandbox.token or not bearer_matches(scope, sandbox.token):
            given = any(k == b"authorization" for k, _ in scope["headers"])
            challenge = b'Bearer realm="envreg sandbox"' + (b', error="invalid_token"' if given else b"")
            await send_error(
                send,
                401,
                HOW_TO_AUTHENTICATE,
                [(b"www-authenticate", challenge)],
                call=await self._call(scope, receive),
                data={"sandbox": sandbox.id, "state": "wrong token" if given else "no token"},
            )
            return
        try:
            body = await read_body(scope, receive, self.max_body)
        except BodyTooLarge:
            message = f"request body over the {self.max_body} byte limit"
            await send_error(send, 413, message, call=mcp_call(scope, None))
            return
        # values without surrounding whitespace, as RFC 9110 5.5 parses them (`Mcp-Name:  x ` is `x`)
        headers = [(k, v.strip(b" \t")) for k, v in scope["headers"] if k not in NOT_FORWARDED]
        if upstream.token:
            headers.append((b"authorization", f"Bearer {upstream.token}".encode()))
        if upstream.generation is not None:
            headers.append((GENERATION, str(upstream.generation).encode()))
        query = f"?{scope['query_string'].decode()}" if scope.get("query_string") else ""
        call = mcp_call(scope, body)
        if scope["method"] == "POST":
            await self._post(sandbox, upstream, upstream.path + query, headers, body, call, receive, send)
        else:
            url = f"http://{upstream.host}:{upstream.port}{upstream.path}{query}"
            await self._stream(sandbox, scope["method"], url, headers, body, call, receive, send)

    async def _call(self, scope: Scope, receive: Receive) -> Call:
        """What a refused request was (`mcp_call`), reading its body when it has one within the limit."""
        if scope["method"] != "POST":
            return mcp_call(scope, None)
        try:
            return mcp_call(scope, await read_body(scope, receive, self.max_body))
        except BodyTooLarge:
            return mcp_call(scope, None)

    def _not_found(self, path: str, sandbox_id: str | None, sandbox: Sandbox | None) -> tuple[str, str]:
        """Why there is no sandbox to relay to, and its state: ended, local or unknown."""
        if sandbox_id is None:
            return f"no MCP endpoint at {shorten(path)!r}: sandboxes answer at /sandboxes/<id>/mcp", "unknown"
        reason = (sandbox.ended if sandbox is not None else None) or self.ended(sandbox_id)
        if reason:
            return f"sandbox {sandbox_id} has ended: {reason}", "ended"
        if sandbox is not None:
            return (
                f"sandbox {sandbox_id} is on the local tier, which has no MCP URL; lease it on a Docker tier",
                "local",
            )
        return f"no sandbox {shorten(sandbox_id)!r}: it never existed here, or it ended long ago", "unknown"

    async def _upstream_error(
        self, send: Send, status: int, sandbox: Sandbox, message: str, call: Call
    ) -> None:
        await send_bytes(send, status, upstream_error_body(status, message, call, sandbox.id))

    def _no_answer(self, sandbox: Sandbox) -> str:
        return f"sandbox {sandbox.id}: no answer in {self.timeout:g} s; the call may still complete"

    async def _post(
        self,
        sandbox: Sandbox,
        upstream: Upstream,
        target: str,
        headers: list,
        body: bytes,
        call: Call,
        receive: Receive,
        send: Send,
    ) -> None:
        """The hot path: one MCP message over a pooled keep-alive connection."""
        try:
            key = (upstream.server_id, upstream.host, upstream.port)
            response = await self.upstream.post(key, target, headers, body)
        except UpstreamTimeout:
            await self._upstream_error(send, 504, sandbox, self._no_answer(sandbox), call)
            return
        except (UpstreamError, OSError) as exc:
            message = f"sandbox {sandbox.id} did not answer: {_reason(exc)}"
            await self._upstream_error(send, 502, sandbox, message, call)
            return
        try:
            await self._relay(sandbox, response.status, response.headers, response.body, receive, send)
        finally:
            await response.body.aclose()  # pyright: ignore[reportAttributeAccessIssue]

    async def _stream(
        self,
        sandbox: Sandbox,
        method: str,
        url: str,
        headers: list,
        body: bytes,
        call: Call,
        receive: Receive,
        send: Send,
    ) -> None:
        """Everything else (the session era's GET stream, DELETE) through the general client."""
        request = self.http.build_request(
            method, url, headers=headers, content=body, timeout=httpx2.Timeout(self.timeout, read=None)
        )
        try:
            with anyio.fail_after(self.timeout):
                response = await self.http.send(request, stream=True)
        except TimeoutError:
            await self._upstream_error(send, 504, sandbox, self._no_answer(sandbox), call)
            return
        except httpx2.TransportError as exc:
            message = f"sandbox {sandbox.id} did not answer: {_reason(exc)}"
            await self._upstream_error(send, 502, sandbox, message, call)
            return
        try:
            await self._relay(
                sandbox, response.status_code, response.headers.raw, response.aiter_raw(), receive, send
            )
        finally:
            await response.aclose()

    async def _relay(
        self,
        sandbox: Sandbox,
        status: int,
        headers: Iterable[tuple[bytes, bytes]],
        chunks: AsyncIterator[bytes],
        receive: Receive,
        send: Send,
    ) -> None:
        """Relay an upstream answer (`relay`): one of known length as it is; a stream until it ends, the
        client leaves, the sandbox ends or the gateway shuts down (an upstream that breaks off ends it).
        """
        headers = list(headers)
        if any(k.lower() == b"content-length" for k, _ in headers):
            await relay(send, status, headers, chunks)
            return
        await send({"type": "http.response.start", "status": status, "headers": relayed_headers(headers)})
        async with anyio.create_task_group() as tg:
            if self._closing:
                tg.cancel_scope.cancel()
            self._streams.add(tg.cancel_scope)
            try:
                tg.start_soon(self._watch, sandbox, receive, tg.cancel_scope)
                try:
                    async for chunk in chunks:
                        await send({"type": "http.response.body", "body": chunk, "more_body": True})
                except _BROKEN as exc:
                    logger.info("sandbox %s: its event stream broke off: %s", sandbox.id, _reason(exc))
                tg.cancel_scope.cancel()
            finally:
                self._streams.discard(tg.cancel_scope)
        await send({"type": "http.response.body", "body": b""})

    @staticmethod
    async def _watch(sandbox: Sandbox, receive: Receive, stream: anyio.CancelScope) -> None:
        """End `stream` once the client has gone or the sandbox has ended."""
        while sandbox.ended is None:
            with anyio.move_on_after(ENDED_POLL_SECONDS):
                if (await receive())["type"] == "http.disconnect":
                    break
        stream.cancel()

    def end_streams(self) -> None:
        """End every relayed stream now, and any that starts from now on (their clients see them end)."""
        self._closing = True
        for scope in list(self._streams):
            scope.cancel()

    async def aclose(self) -> None:
        self.end_streams()
        await self.upstream.aclose()
