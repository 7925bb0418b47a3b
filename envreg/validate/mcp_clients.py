"""The `mcp` SDK's own client, in both protocol eras, against a sandbox's MCP URL (through the gateway)."""

from __future__ import annotations

from typing import Any

from envreg.http.client import async_client
from envreg.protocol import MCP_SESSION_VERSION, MCP_VERSION

ERAS = {MCP_VERSION: MCP_VERSION, MCP_SESSION_VERSION: "legacy"}
"""Protocol era -> the `mcp.Client` mode that speaks it."""
TOOL_FIELDS = ("name", "description", "inputSchema", "outputSchema", "annotations")


async def list_tools(url: str, token: str | None, era: str) -> tuple[str, list[dict[str, Any]]]:
    """(negotiated protocol version, every tool in wire form) as a real MCP client of `era` sees them."""
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    headers = {"authorization": f"Bearer {token}"} if token else {}
    async with async_client(headers=headers, timeout=30) as http:
        async with Client(streamable_http_client(url, http_client=http), mode=ERAS[era]) as client:
            tools: list[dict[str, Any]] = []
            cursor = None
            while True:
                page = await client.list_tools(cursor=cursor) if cursor else await client.list_tools()
                tools += [wire(t) for t in page.tools]
                cursor = page.next_cursor
                if not cursor:
                    break
            return str(client.protocol_version), tools


def wire(tool: Any) -> dict[str, Any]:
    """The fields of a tool that the manifest records, in wire form."""
    data = tool.model_dump(mode="json", by_alias=True, exclude_none=True)
    out = {k: data[k] for k in TOOL_FIELDS if k in data}
    if "annotations" in out:
        out["annotations"] = {k: v for k, v in out["annotations"].items() if k.endswith("Hint")}
    return out
