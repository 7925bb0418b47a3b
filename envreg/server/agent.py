"""The agent plane: MCP streamable HTTP at ``/mcp`` (default instance) and ``/i/<id>/mcp``."""

from __future__ import annotations

import anyio
from starlette.types import Receive, Scope, Send

from envreg.http.asgi import BodyTooLarge, read_body, replay, send_bytes, send_error
from envreg.http.auth import bearer_matches
from envreg.http.jsonrpc import mcp_call
from envreg.server.instances import InstanceStore, instance_id_from_path
from envreg.server.lean import HostCheck, LeanPath
from envreg.server.sdk import LazySDK
from envreg.server.sessions import SessionLimits

_BLANK = (b" ", b"\t")


class AgentPlane:
    """Routes each request to its instance; the lean path first, the `mcp` SDK for everything else.

    Only the environment's tools are reachable here: no control route exists on this app. With a
    `token` (every sandbox container has one), each request needs ``Authorization: Bearer <token>``.
    """

    def __init__(
        self,
        store: InstanceStore,
        *,
        max_body: int,
        loopback: bool,
        fast_path: bool = True,
        preload_sdk: bool = False,
        token: str | None = None,
        sessions: SessionLimits | None = None,
    ) -> None:
        self.store = store
        self.token = token
        self.max_body = max_body
        self.sdk = LazySDK(
            store,
            max_body,
            loopback,
            sessions or SessionLimits.detect(),
            preload=preload_sdk or not fast_path,
        )
        self.lean = LeanPath(store, HostCheck() if loopback else None) if fast_path else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        if any(v[:1] in _BLANK or v[-1:] in _BLANK for _, v in scope["headers"]):
            # values without surrounding whitespace, as RFC 9110 5.5 parses them (`Mcp-Name:  x ` is `x`)
            scope = {**scope, "headers": [(k, v.strip(b" \t")) for k, v in scope["headers"]]}
        if self.token is not None and not bearer_matches(scope, self.token):
            message = (
                "this environment server answers only its runtime: reach the sandbox through its MCP URL"
            )
            await send_error(send, 401, message, call=mcp_call(scope, None))
            return
        instance_id = instance_id_from_path(scope["path"])
        if instance_id is None:
            message = "not found: MCP endpoints are /mcp and /i/<instance>/mcp"
            await send_error(send, 404, message, call=mcp_call(scope, None))
            return
        if instance_id not in self.store:
            message = f"no instance {instance_id!r}: deleted or never created"
            await send_error(send, 404, message, call=(True, None))
            return
        if self.lean is not None and scope["method"] == "POST":
            try:
                body = await read_body(scope, receive, self.max_body)
            except BodyTooLarge:
                message = f"Request body too large: over this server's limit of {self.max_body:,} bytes"
                await send_bytes(send, 413, message.encode(), b"text/plain; charset=utf-8")
                return
            answer = self.lean.answer(scope["headers"], body, instance_id)
            if answer is not None:
                await send_bytes(send, *answer)
                return
            receive = replay(body, receive)
        await self.sdk(scope, receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        await receive()  # lifespan.startup
        async with anyio.create_task_group() as tg:
            tg.start_soon(self.sdk.run)
            await send({"type": "lifespan.startup.complete"})
            await receive()  # lifespan.shutdown
            tg.cancel_scope.cancel()
        await send({"type": "lifespan.shutdown.complete"})
