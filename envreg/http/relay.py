"""Relaying an upstream's answer: which headers stay with one hop, and the answer sent on as it comes."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable

from starlette.types import Send

HOP_BY_HOP = {
    b"connection",
    b"keep-alive",
    b"transfer-encoding",
    b"te",
    b"trailer",
    b"upgrade",
    b"proxy-authorization",
    b"proxy-connection",
}
NOT_RELAYED = HOP_BY_HOP | {b"date", b"server"}
"""Headers of an upstream answer that are not sent on (uvicorn sets its own date and server)."""


def relayed_headers(headers: Iterable[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """An upstream answer's headers as sent on: lowercased, without `NOT_RELAYED`."""
    return [(k.lower(), v) for k, v in headers if k.lower() not in NOT_RELAYED]


async def relay(
    send: Send, status: int, headers: Iterable[tuple[bytes, bytes]], chunks: AsyncIterator[bytes]
) -> None:
    """Relay an upstream answer as it comes, without hop-by-hop headers or the upstream's date/server."""
    await send({"type": "http.response.start", "status": status, "headers": relayed_headers(headers)})
    async for chunk in chunks:
        await send({"type": "http.response.body", "body": chunk, "more_body": True})
    await send({"type": "http.response.body", "body": b""})
