"""Small raw-ASGI helpers shared by the planes."""

from __future__ import annotations

import hmac
import json
from typing import Any

from starlette.types import Message, Receive, Scope, Send


class BodyTooLarge(Exception):
    pass


async def send_bytes(send: Send, status: int, body: bytes, content_type: bytes = b"application/json") -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", content_type), (b"content-length", str(len(body)).encode())],
        }
    )
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
