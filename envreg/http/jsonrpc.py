"""Which requests are MCP (JSON-RPC 2.0) ones, and JSON-RPC error objects."""

from __future__ import annotations

import json
from typing import Any

from starlette.types import Scope

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
        return NOT_JSONRPC
    if isinstance(message, list):
        return True, None
    if not isinstance(message, dict) or not ({"jsonrpc", "method"} & message.keys()):
        return NOT_JSONRPC
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
