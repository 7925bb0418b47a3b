"""The lean path: `tools/call`, `tools/list` and `server/discover` at protocol 2026-07-28, JSON responses.

A request is answered here only when it is a plain, well-formed 2026-07-28 request that the SDK
would answer with a result, or a call of a tool the instance does not offer (the SDK's -32602 error,
HTTP 400): the SDK starts on the first request that needs it, an import of a second or more of CPU
that on a loaded host outlasts the gateway's wait, and an agent's unknown tool must not wait on it.
Anything else (another era, a header mismatch, a cursor, `Mcp-Param-*` headers, a wildcard
accept...) returns None and goes to the `mcp` SDK, which owns every other error. Differential tests
check that both paths give the same answers.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

from pydantic_core import from_json, to_json

from envreg.errors import UnknownToolError
from envreg.http.loopback import LOOPBACK_HOSTS
from envreg.protocol import MCP_VERSION as MODERN_VERSION
from envreg.protocol import META_CLIENT_CAPABILITIES as CLIENT_CAPABILITIES_KEY
from envreg.protocol import META_CLIENT_INFO as CLIENT_INFO_KEY
from envreg.protocol import META_PROTOCOL_VERSION as PROTOCOL_VERSION_KEY
from envreg.protocol import META_SERVER_INFO as SERVER_INFO_KEY
from envreg.server.instances import InstanceStore

_MODERN = MODERN_VERSION.encode()
_ROUTING_HEADERS = (b"mcp-protocol-version", b"mcp-method", b"mcp-name")
_CALL_PARAMS = frozenset({"name", "arguments", "_meta"})
_META_ONLY = frozenset({"_meta"})
_OK = 200
INVALID_PARAMS = -32602
INVALID_PARAMS_STATUS = 400
"""The HTTP status the SDK gives a -32602 error (`mcp.shared.inbound.ERROR_CODE_HTTP_STATUS`)."""
_B64_SENTINEL = re.compile(rb"^=\?base64\?(?P<payload>.*)\?=$")


class HostCheck:
    """DNS-rebinding protection for a loopback bind, the rule the SDK applies (`host:*`, `origin:*`)."""

    def __init__(self, hosts: tuple[str, ...] = LOOPBACK_HOSTS) -> None:
        self.hosts = tuple(f"{h}:".encode() for h in hosts)
        self.origins = tuple(f"http://{h}:".encode() for h in hosts)

    def allows(self, host: bytes | None, origin: bytes | None) -> bool:
        if not host or not host.startswith(self.hosts):
            return False
        return origin is None or origin.startswith(self.origins)


class LeanPath:
    """Answers the hot MCP methods without the SDK's per-request machinery."""

    def __init__(self, store: InstanceStore, host_check: HostCheck | None) -> None:
        env = store.env
        self.store = store
        self.tools = env.tools
        self.host_check = host_check
        self.server_info = {SERVER_INFO_KEY: {"name": env.name, "version": env.version}}
        self._list_result: bytes | None = None
        self._discover_result = to_json(
            {
                "cacheScope": "private",
                "capabilities": {"tools": {"listChanged": False}},
                "resultType": "complete",
                "supportedVersions": [MODERN_VERSION],
                "ttlMs": 0,
                "_meta": self.server_info,
            }
        )

    def answer(
        self, headers: list[tuple[bytes, bytes]], body: bytes, instance_id: str
    ) -> tuple[int, bytes] | None:
        """The HTTP status and JSON response body, or None to hand the request to the SDK."""
        h: dict[bytes, bytes] = {}
        for key, value in headers:
            if key in h:
                if key in _ROUTING_HEADERS:
                    return None
                continue
            if key.startswith(b"mcp-param-"):
                return None
            h[key] = value
        if h.get(b"mcp-protocol-version") != _MODERN:
            return None
        if not h.get(b"content-type", b"").lower().startswith(b"application/json"):
            return None
        if b"application/json" not in h.get(b"accept", b"").lower():
            return None
        if self.host_check is not None and not self.host_check.allows(h.get(b"host"), h.get(b"origin")):
            return None
        try:
            msg = from_json(body)  # the parser the SDK reads JSON-RPC messages with (pydantic's)
        except ValueError:
            return None
        if type(msg) is not dict or msg.get("jsonrpc") != "2.0" or len(msg) != 4:
            return None
        rid, method, params = msg.get("id"), msg.get("method"), msg.get("params")
        if type(rid) not in (int, str) or type(method) is not str or type(params) is not dict:
            return None
        meta = params.get("_meta")
        if type(meta) is not dict or meta.get(PROTOCOL_VERSION_KEY) != MODERN_VERSION:
            return None
        if (
            type(meta.get(CLIENT_CAPABILITIES_KEY)) is not dict
            or type(meta.get(CLIENT_INFO_KEY, {})) is not dict
        ):
            return None
        if h.get(b"mcp-method") != method.encode():
            return None
        if method == "tools/call":
            return self._call(h, params, instance_id, rid)
        if params.keys() != _META_ONLY:
            return None
        if method == "tools/list":
            if self.store.augmenter(instance_id) is not None:
                return _OK, _envelope(rid, self._listing(self.store.list_tools(instance_id)))
            if self._list_result is None:  # the tools' schemas are built on first use (`Tool.models`)
                self._list_result = self._listing(self.store.env.list_tools())
            return _OK, _envelope(rid, self._list_result)
        if method == "server/discover":
            return _OK, _envelope(rid, self._discover_result)
        return None

    def _call(
        self, h: dict[bytes, bytes], params: dict[str, Any], instance_id: str, rid: int | str
    ) -> tuple[int, bytes] | None:
        """A tool's result, or the SDK's error for a tool the instance does not offer."""
        name, arguments = params.get("name"), params.get("arguments")
        if type(name) is not str or not params.keys() <= _CALL_PARAMS:
            return None
        if arguments is not None and type(arguments) is not dict:
            return None
        if header_name(h.get(b"mcp-name")) != name:
            return None
        if instance_id not in self.store:
            return None
        try:
            result = self.store.call_tool(instance_id, name, arguments).to_mcp()
        except UnknownToolError as exc:  # the SDK's answer (`envreg.server.sdk`), without starting it
            return INVALID_PARAMS_STATUS, _error(rid, INVALID_PARAMS, str(exc))
        result["resultType"] = "complete"
        result["_meta"] = self.server_info
        return _OK, _envelope(rid, to_json(result))

    def _listing(self, tools: list[dict[str, Any]]) -> bytes:
        result = {
            "cacheScope": "private",
            "resultType": "complete",
            "tools": tools,
            "ttlMs": 0,
            "_meta": self.server_info,
        }
        return to_json(result)


def header_name(value: bytes | None) -> str | None:
    """An ``Mcp-Name`` header as the SDK reads it (`mcp.shared.inbound.decode_header_value`): verbatim
    (Latin-1, as ASGI servers decode it), or the UTF-8 of a ``=?base64?...?=`` value (its clients wrap a
    name that is not plain ASCII so); None for a malformed wrapped value, which matches no name."""
    if value is None:
        return None
    if not value.startswith(b"=?"):
        return value.decode("latin-1")
    wrapped = _B64_SENTINEL.fullmatch(value)
    if wrapped is None:
        return value.decode("latin-1")
    payload = wrapped["payload"]
    try:
        decoded = base64.b64decode(payload, validate=True)
        if base64.b64encode(decoded) != payload:  # non-canonical: the SDK's encoder never writes it
            return None
        return decoded.decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None


def _envelope(rid: int | str, result: bytes) -> bytes:
    ident = b"%d" % rid if type(rid) is int else to_json(rid)
    return b'{"jsonrpc":"2.0","id":%b,"result":%b}' % (ident, result)


def _error(rid: int | str, code: int, message: str) -> bytes:
    error = {"jsonrpc": "2.0", "id": rid, "error": {"code": code, "message": message}}
    return to_json(error)
