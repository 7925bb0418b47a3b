"""Drive sandboxes and servers with the `mcp` SDK's own client, in either protocol era."""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import Any

from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from envreg.env.scenario import CallOutcome
from envreg.http.client import async_client

ERAS = {"2026-07-28": "2026-07-28", "2025-11-25": "legacy"}


@asynccontextmanager
async def mcp_client(url: str, era: str, token: str | None = None):
    """A connected `mcp.Client` at `url`, speaking the given protocol era."""
    headers = {} if token is None else {"authorization": f"Bearer {token}"}
    async with async_client(headers=headers, timeout=30) as http:
        async with Client(streamable_http_client(url, http_client=http), mode=ERAS[era]) as client:
            yield client


def outcome(result: Any) -> CallOutcome:
    """An MCP `CallToolResult` in the form scenarios compare."""
    return CallOutcome(is_error=bool(result.is_error), text=result.content[0].text)


def caller(client: Client):
    async def call(tool: str, arguments: dict[str, Any]) -> CallOutcome:
        return outcome(await client.call_tool(tool, arguments))

    return call
