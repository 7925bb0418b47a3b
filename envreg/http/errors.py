"""Every front's error body: a JSON-RPC error for an MCP request, ``{"error": message, ...}`` otherwise.

No path of the host reaches a client (`envreg.host_paths.public_text`).
"""

from __future__ import annotations

import json
from typing import Any

from envreg.host_paths import public_text
from envreg.http.jsonrpc import INVALID_REQUEST, NOT_JSONRPC, Call, jsonrpc_error


def error_body(
    message: str, call: Call = NOT_JSONRPC, code: int = INVALID_REQUEST, data: dict[str, Any] | None = None
) -> bytes:
    """A JSON-RPC error for an MCP request (`envreg.http.jsonrpc.mcp_call`), `data` its ``data``; else
    ``{"error": message}``."""
    if call[0]:
        return json.dumps(jsonrpc_error(call[1], code, public_text(message), data)).encode()
    return json.dumps(error_json(message)).encode()


def error_json(message: str, **fields: Any) -> dict[str, Any]:
    """``{"error": message, **fields}``: the body of every error a REST route answers."""
    return {"error": public_text(message), **fields}


def too_large(limit: int, then: str = "") -> str:
    """What a 413 says: the limit, in bytes, and what to do (`then`, e.g. ``"send smaller batches"``)."""
    return f"request body over this server's limit of {limit:,} bytes" + (f": {then}" if then else "")
