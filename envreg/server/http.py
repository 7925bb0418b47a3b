"""Small raw-ASGI helpers shared by the planes."""

from __future__ import annotations

import hmac
import json
from collections.abc import Iterable
from typing import Any

from starlette.types import Message, Receive, Scope, Send

from envreg.host_paths import public_text


class BodyTooLarge(Exception):
    pass


async def send_bytes(
    send: Send,
    status: int,
    body: bytes,
    content_type: bytes = b"application/json",
    headers: Iterable[tuple[bytes, bytes]] = (),
) -> None:
    start = [(b"content-type", content_type), (b"content-length", str(len(body)).encode()), *headers]
    await send({"type": "http.response.start", "status": status, "headers": start})
    await send({"type": "http.response.body", "body": body})


async def send_json(send: Send, status: int, data: Any) -> None:
    await send_bytes(send, status, json.dumps(data, separators=(",", ":")).encode())


async def read_body(scope: Scope, receive: Receive, limit: int) -> bytes:
    """The whole request body; raises `BodyTooLarge` past `limit` bytes (checked before reading when it can be)."""
    for key, value in scope["headers"]:
        if key == b"content-length" and value.isdigit() and int(value) > limit:
            raise BodyTooLarge
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def replay(body: bytes, receive: Receive) -> Receive:
    """A `receive` that yields an already-read body first, then defers to the real one."""
    sent = False

    async def wrapped() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return wrapped


def bearer_token(scope: Scope) -> bytes | None:
    """The token of an ``Authorization: Bearer <token>`` header (the scheme is case-insensitive, RFC 7235)."""
    given = next((v for k, v in scope["headers"] if k == b"authorization"), None)
    if given is None:
        return None
    scheme, _, token = given.strip().partition(b" ")
    return token.strip() if scheme.lower() == b"bearer" and token.strip() else None


def bearer_matches(scope: Scope, expected: str) -> bool:
    """Whether the request carries exactly the bearer token `expected` (compared in constant time)."""
    return hmac.compare_digest(bearer_token(scope) or b"", expected.encode())


INVALID_REQUEST = -32600
INTERNAL_ERROR = -32603
Call = tuple[bool, Any]
"""What a request was: whether it is an MCP (JSON-RPC) one, and the id to answer it with."""
NOT_JSONRPC: Call = (False, None)
_MCP_HEADERS = (b"mcp-session-id", b"mcp-protocol-version")


def jsonrpc_error(rid: Any, code: int, message: str, data: Any = None) -> dict[str, Any]:
    """A JSON-RPC 2.0 error response (`rid` None when the request's id is unknown)."""
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": rid, "error": error}


def jsonrpc_request(body: bytes) -> Call:
    """Whether `body` is a JSON-RPC message (an object with "jsonrpc" or "method", or a batch), and the
    id to answer it with (None when it has none)."""
    try:
        message = json.loads(body)
    except (ValueError, RecursionError):
        return False, None
    if isinstance(message, list):
        return True, None
    if not isinstance(message, dict) or not ({"jsonrpc", "method"} & message.keys()):
        return False, None
    rid = message.get("id")
    return True, rid if isinstance(rid, (str, int)) and not isinstance(rid, bool) else None


def mcp_call(scope: Scope, body: bytes | None) -> Call:
    """A POST whose body is JSON-RPC (with `body` None, unread: a JSON one), or a GET / DELETE with MCP
    headers, is an MCP request: its errors are JSON-RPC errors, which every MCP client shows."""
    if scope["method"] == "POST":
        if body is not None:
            return jsonrpc_request(body)
        content_type = next((v for k, v in scope["headers"] if k == b"content-type"), b"")
        return content_type.lower().startswith(b"application/json"), None
    return any(k in _MCP_HEADERS for k, _ in scope["headers"]), None


def error_body(
    message: str, call: Call = NOT_JSONRPC, code: int = INVALID_REQUEST, data: dict[str, Any] | None = None
) -> bytes:
    """A JSON-RPC error for an MCP request (`mcp_call`), else ``{"error": message}``; no host path in
    `message` reaches the client (`envreg.errors.public_text`)."""
    message = public_text(message)
    answer = jsonrpc_error(call[1], code, message, data) if call[0] else {"error": message}
    return json.dumps(answer).encode()


async def send_error(
    send: Send,
    status: int,
    message: str,
    headers: Iterable[tuple[bytes, bytes]] = (),
    *,
    call: Call = NOT_JSONRPC,
    code: int = INVALID_REQUEST,
    data: dict[str, Any] | None = None,
) -> None:
    """An error answer (`error_body`)."""
    await send_bytes(send, status, error_body(message, call, code, data), headers=headers)


class KeepAlive:
    """ASGI middleware: every answer says how long its connection stays open idle (``Keep-Alive:
    timeout=N``, which Node's fetch and other clients follow); the server (uvicorn's
    ``timeout_keep_alive``) closes it `envreg.protocol.KEEP_ALIVE_GRACE` seconds later than that."""

    def __init__(self, app: Any, seconds: float) -> None:
        self.app = app
        self.header = (b"keep-alive", b"timeout=%d" % seconds)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def advertise(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", ()), self.header]}
            await send(message)

        await self.app(scope, receive, advertise)
