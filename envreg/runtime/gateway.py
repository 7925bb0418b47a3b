"""The gateway: one host port that routes ``/sandboxes/<id>/mcp`` to the right instance, per-sandbox token."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Iterable, Iterator

import httpx2
import uvicorn
from starlette.types import Receive, Scope, Send

from envreg.protocol import GATEWAY_PREFIX
from envreg.runtime.backends.base import Upstream
from envreg.runtime.sandbox import Sandbox
from envreg.runtime.upstream import UpstreamError, UpstreamPool
from envreg.server.http import BodyTooLarge, bearer_matches, read_body, send_json

_HOP_BY_HOP = {
    b"connection",
    b"keep-alive",
    b"transfer-encoding",
    b"te",
    b"trailer",
    b"upgrade",
    b"proxy-authorization",
    b"proxy-connection",
}
_NOT_FORWARDED = _HOP_BY_HOP | {b"host", b"authorization", b"content-length"}
_NOT_RELAYED = _HOP_BY_HOP | {b"date", b"server"}  # uvicorn sets its own
PREFIX = GATEWAY_PREFIX


def sandbox_id_from_path(path: str) -> str | None:
    if not path.startswith(PREFIX):
        return None
    parts = path[len(PREFIX) :].rstrip("/").split("/")
    return parts[0] if len(parts) == 2 and parts[1] == "mcp" and parts[0] else None


class Gateway:
    """Streams MCP traffic to sandboxes; 401 without the sandbox's token, 404 once it has ended."""

    def __init__(
        self, lookup: Callable[[str], Sandbox | None], http: httpx2.AsyncClient, max_body: int = 4 << 20
    ):
        self.lookup = lookup
        self.http = http
        self.max_body = max_body
        self.upstream = UpstreamPool()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        sandbox_id = sandbox_id_from_path(scope["path"])
        sandbox = self.lookup(sandbox_id) if sandbox_id else None
        upstream = sandbox.upstream if sandbox is not None and sandbox.ended is None else None
        if sandbox is None or upstream is None:
            what = f"sandbox {sandbox_id!r}" if sandbox_id else scope["path"]
            reason = sandbox.ended if sandbox is not None and sandbox.ended else "unknown or ended"
            await send_json(
                send, 404, {"error": f"no {what}: {reason}; MCP endpoints are /sandboxes/<id>/mcp"}
            )
            return
        if not sandbox.token or not bearer_matches(scope, sandbox.token):
            await send(
                {
                    "type": "http.response.start",
                    "status": 401,
                    "headers": [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")],
                }
            )
            await send({"type": "http.response.body", "body": b'{"error":"missing or wrong sandbox token"}'})
            return
        try:
            body = await read_body(scope, receive, self.max_body)
        except BodyTooLarge:
            await send_json(send, 413, {"error": f"request body over the {self.max_body} byte limit"})
            return
        headers = [(k, v) for k, v in scope["headers"] if k not in _NOT_FORWARDED]
        if upstream.token:
            headers.append((b"authorization", f"Bearer {upstream.token}".encode()))
        query = f"?{scope['query_string'].decode()}" if scope.get("query_string") else ""
        if scope["method"] == "POST":
            await self._post(sandbox, upstream, upstream.path + query, headers, body, send)
        else:
            url = f"http://{upstream.host}:{upstream.port}{upstream.path}{query}"
            await self._stream(sandbox, scope["method"], url, headers, body, send)

    async def _post(
        self, sandbox: Sandbox, upstream: Upstream, target: str, headers: list, body: bytes, send: Send
    ) -> None:
        """The hot path: one MCP message over a pooled keep-alive connection."""
        try:
            key = (upstream.server_id, upstream.host, upstream.port)
            response = await self.upstream.post(key, target, headers, body)
        except (UpstreamError, OSError) as exc:
            await send_json(send, 502, {"error": f"sandbox {sandbox.id} did not answer: {exc}"})
            return
        try:
            await _relay(send, response.status, response.headers, response.body)
        finally:
            await response.body.aclose()

    async def _stream(
        self, sandbox: Sandbox, method: str, url: str, headers: list, body: bytes, send: Send
    ) -> None:
        """Everything else (the session era's GET stream, DELETE) through the general client."""
        request = self.http.build_request(method, url, headers=headers, content=body)
        try:
            response = await self.http.send(request, stream=True)
        except httpx2.TransportError as exc:
            await send_json(send, 502, {"error": f"sandbox {sandbox.id} did not answer: {exc}"})
            return
        try:
            await _relay(send, response.status_code, response.headers.raw, response.aiter_raw())
        finally:
            await response.aclose()


async def _relay(
    send: Send, status: int, headers: Iterable[tuple[bytes, bytes]], chunks: AsyncIterator[bytes]
) -> None:
    """Stream an upstream response to the client, without hop-by-hop headers or the upstream's date/server."""
    out = [(k.lower(), v) for k, v in headers if k.lower() not in _NOT_RELAYED]
    await send({"type": "http.response.start", "status": status, "headers": out})
    async for chunk in chunks:
        await send({"type": "http.response.body", "body": chunk, "more_body": True})
    await send({"type": "http.response.body", "body": b""})


class QuietServer(uvicorn.Server):
    """A uvicorn server that leaves the host process's signal handlers alone (it is embedded)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield
