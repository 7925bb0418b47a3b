"""Shared by the gateway tests: raw requests and a real `mcp` client that abandons its session."""

from __future__ import annotations

import contextlib

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from servers import modern_request

LIST, MODERN = modern_request("tools/list")
LEGACY = "2025-11-25"


@contextlib.asynccontextmanager
async def legacy_client(sb, sessions: list[str]):
    """A real `mcp` client in the 2025-11-25 session era that leaves without ending its session,
    as a client does when its network drops: its event stream is abandoned, not closed politely."""

    async def remember(response: httpx2.Response) -> None:
        if sid := response.headers.get("mcp-session-id"):
            sessions.append(sid)

    async with httpx2.AsyncClient(
        headers={"authorization": f"Bearer {sb.token}"}, event_hooks={"response": [remember]}, timeout=30
    ) as http:
        transport = streamable_http_client(sb.mcp_url, http_client=http, terminate_on_close=False)
        async with Client(transport, mode="legacy") as client:
            yield client
