"""Raw-ASGI answers, capped request bodies and ``Keep-Alive``: what every front sends and reads with."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from envreg.http.errors import error_body, too_large
from envreg.http.jsonrpc import INVALID_REQUEST, NOT_JSONRPC, Call


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


async def send_json(send: Send, status: int, data: Any, headers: Iterable[tuple[bytes, bytes]] = ()) -> None:
    await send_bytes(send, status, json.dumps(data, separators=(",", ":")).encode(), headers=headers)


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


class BodyLimit:
    """ASGI middleware: a request body over `limit` bytes gets a 413 (`then` says what to do) before the
    app reads it; the app reads the body as sent."""

    def __init__(self, app: ASGIApp, limit: int, then: str = "") -> None:
        self.app = app
        self.limit = limit
        self.then = then

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD"):
            await self.app(scope, receive, send)
            return
        try:
            body = await read_body(scope, receive, self.limit)
        except BodyTooLarge:
            await send_error(send, 413, too_large(self.limit, self.then))
            return
        await self.app(scope, replay(body, receive), send)


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
