"""A node's proxy: the one port of a Ray node through which the runtime reaches that node's containers.

Containers sit on an internal Docker network that only their own host can reach. Each node's agent
serves this proxy on the node's cluster address, so the runtime (wherever its driver runs) and its
gateway reach every container the same way:

    /servers/<container id>/agent/<path>    -> the container's agent plane (MCP)
    /servers/<container id>/control/<path>  -> the container's control plane

Every request must carry the runtime's secret (``Authorization: Bearer``), which the proxy swaps for
the container's own agent or control token: only the runtime knows the secret, and the containers'
tokens never leave the node. POSTs (MCP messages, the hot path) go over pooled keep-alive connections;
other requests (the session era's GET stream, state reads and writes) are streamed.
"""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import urlsplit

import httpx2
from starlette.types import Receive, Scope, Send

from envreg.http.access import shorten
from envreg.http.asgi import BodyTooLarge, read_body, send_bytes, send_error
from envreg.http.auth import bearer_matches
from envreg.http.errors import error_body, too_large
from envreg.http.jsonrpc import INTERNAL_ERROR
from envreg.http.relay import relay
from envreg.runtime.backends.base import Server
from envreg.runtime.gateway import NOT_FORWARDED
from envreg.runtime.upstream import UpstreamError, UpstreamPool

PREFIX = "/servers/"
PLANES = ("agent", "control")
MAX_BODY = 64 << 20
"""Above any environment server's own limit: the container answers 413 itself."""
STREAM_TIMEOUT = httpx2.Timeout(30.0, connect=2.0, read=None)
"""A session-era GET stream stays open as long as the client keeps it."""


def server_path(server_id: str, plane: str) -> str:
    """Where the proxy serves a container's plane (``agent`` or ``control``)."""
    return f"{PREFIX}{server_id}/{plane}"


class NodeProxy:
    """Forwards ``/servers/<id>/<plane>/...`` to the servers `lookup` knows, checking the runtime's secret.

    A server is reached where its own `EnvClient` points (``agent_url``, ``control_url``), with its tokens.
    """

    def __init__(self, lookup: Callable[[str], Server | None], secret: str, http: httpx2.AsyncClient) -> None:
        self.lookup = lookup
        self.secret = secret
        self.http = http
        self.upstream = UpstreamPool()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        server_id, plane, rest = _split(scope["path"])
        if plane is None:
            await send_error(send, 404, f"no route {shorten(scope['path'])}: use {PREFIX}<id>/agent|control/")
            return
        if not bearer_matches(scope, self.secret):
            await _fail(send, plane, 401, "missing or wrong runtime secret")
            return
        server = self.lookup(server_id)
        if server is None:
            await _fail(send, plane, 404, f"no server {server_id[:12]} on this node")
            return
        try:
            body = await read_body(scope, receive, MAX_BODY)
        except BodyTooLarge:
            await _fail(send, plane, 413, too_large(MAX_BODY))
            return
        # where the node's own client for that server goes, with the container's own token
        client = server.client
        base, auth = (
            (client.agent_url, client.agent_auth) if plane == "agent" else (client.control_url, client.auth)  # pyright: ignore[reportAttributeAccessIssue]
        )
        address = urlsplit(base)
        host, port = address.hostname or "", address.port or 80
        headers = [(k, v) for k, v in scope["headers"] if k not in NOT_FORWARDED]
        headers += [(k.encode(), v.encode()) for k, v in auth.items()]
        target = rest + (f"?{scope['query_string'].decode()}" if scope.get("query_string") else "")
        try:
            if scope["method"] == "POST":
                response = await self.upstream.post((server_id, host, port), target, headers, body)
                try:
                    await relay(send, response.status, response.headers, response.body)
                finally:
                    await response.body.aclose()  # pyright: ignore[reportAttributeAccessIssue]
                return
            request = self.http.build_request(
                scope["method"],
                f"http://{host}:{port}{target}",
                headers=headers,
                content=body,
                timeout=STREAM_TIMEOUT,
            )
            streamed = await self.http.send(request, stream=True)
        except (UpstreamError, OSError, httpx2.TransportError) as exc:
            await _fail(send, plane, 502, f"container {server_id[:12]} did not answer: {exc}")
            return
        try:
            await relay(send, streamed.status_code, streamed.headers.raw, streamed.aiter_raw())
        finally:
            await streamed.aclose()


def _split(path: str) -> tuple[str, str | None, str]:
    """``/servers/<id>/<plane>/<rest>`` -> (id, plane, ``/<rest>``); plane None when the path is not one."""
    if not path.startswith(PREFIX):
        return "", None, ""
    server_id, _, tail = path[len(PREFIX) :].partition("/")
    plane, _, rest = tail.partition("/")
    if not server_id or plane not in PLANES:
        return "", None, ""
    return server_id, plane, "/" + rest


async def _fail(send: Send, plane: str, status: int, message: str) -> None:
    """An error in the plane's own form: a JSON-RPC error for MCP clients, ``{"error"}`` for the control
    plane (`envreg.http.errors.error_body`)."""
    await send_bytes(send, status, error_body(message, (plane == "agent", None), INTERNAL_ERROR))
