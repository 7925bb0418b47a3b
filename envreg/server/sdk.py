"""The `mcp` SDK side of the agent plane, imported in the background so that a server starts fast."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import anyio

from envreg.env import UnknownToolError
from envreg.http.loopback import LOOPBACK_HOSTS
from envreg.server.instances import InstanceStore, instance_id_from_path
from envreg.server.sessions import SessionGate, SessionLimits

if TYPE_CHECKING:
    from starlette.types import Receive, Scope, Send

logger = logging.getLogger("envreg.server")


def build_sdk_app(
    store: InstanceStore, max_body: int, loopback: bool, limits: SessionLimits
) -> tuple[SessionGate, Any]:
    """A low-level `mcp` Server exposing only the environment's tools, its session manager, and the
    `SessionGate` in front of it (the ASGI app to serve)."""
    import mcp_types as types
    from mcp.server.lowlevel.server import Server
    from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
    from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
    from mcp.shared.exceptions import MCPError
    from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

    env = store.env
    listed = env.list_tools()
    tools = [types.Tool.model_validate(t) for t in listed]
    input_schemas = {t["name"]: t["inputSchema"] for t in listed}

    def instance_for(ctx: Any) -> str:
        path = ctx.request.url.path if ctx.request is not None else "/mcp"
        instance_id = instance_id_from_path(path) or ""
        if instance_id not in store:
            raise MCPError(types.INVALID_REQUEST, f"no instance at {path}: it was deleted or never created")
        return instance_id

    async def list_tools(ctx: Any, params: Any) -> Any:
        instance_id = instance_for(ctx)
        if store.augmenter(instance_id) is not None:
            listed = store.list_tools(instance_id)
            return types.ListToolsResult(tools=[types.Tool.model_validate(t) for t in listed])
        return types.ListToolsResult(tools=tools)

    async def call_tool(ctx: Any, params: Any) -> Any:
        instance_id = instance_for(ctx)
        try:
            result = store.call_tool(instance_id, params.name, params.arguments)
        except UnknownToolError as exc:
            raise MCPError(types.INVALID_PARAMS, str(exc)) from None
        return types.CallToolResult.model_validate(result.to_mcp())

    server = Server(
        env.name,
        version=env.version,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        get_tool_input_schema=input_schemas.get,
    )
    server.middleware = []  # no tracing exporter is ever installed here; skip the per-request span
    security = None
    if loopback:
        security = TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=[f"{h}:*" for h in LOOPBACK_HOSTS],
            allowed_origins=[f"http://{h}:*" for h in LOOPBACK_HOSTS],
        )
    manager = StreamableHTTPSessionManager(
        app=server,
        json_response=True,
        security_settings=security,
        max_request_body_size=max_body,
        session_idle_timeout=limits.idle_timeout,
        # the gate keeps to `limits.max_sessions`; this is a backstop, with room for the opening requests
        # that are not initializes (each holds a session while the SDK refuses it)
        max_sessions=limits.max_sessions + max(64, limits.max_sessions // 4),
    )
    gate = SessionGate(
        StreamableHTTPASGIApp(manager),
        limits,
        max_body=max_body,
        handshake_versions=HANDSHAKE_PROTOCOL_VERSIONS,
        security=TransportSecurityMiddleware(security),
    )
    store.watch_deletes(gate.end_instance)
    return gate, manager


class LazySDK:
    """Starts the SDK only when a request needs it (or at once with `preload`), off the event loop.

    Importing `mcp.server` costs about 1.5 s of CPU; a 2026-07-28 client on the lean path never
    needs it, so containers that only serve those start in a fraction of that.
    """

    def __init__(
        self,
        store: InstanceStore,
        max_body: int,
        loopback: bool,
        limits: SessionLimits,
        preload: bool = False,
    ) -> None:
        self._args = (store, max_body, loopback, limits)
        self.limits = limits
        self._needed = anyio.Event()
        self._ready = anyio.Event()
        self._asgi: SessionGate | None = None
        self._error: BaseException | None = None
        self._started = False
        if preload:
            self._needed.set()

    async def run(self) -> None:
        """Serve until cancelled (run in the server's task group, or its lifespan's); runs once."""
        if self._started:
            return
        self._started = True
        await self._needed.wait()
        try:
            await anyio.to_thread.run_sync(_import_sdk)
            self._asgi, manager = build_sdk_app(*self._args)
        except Exception as exc:
            logger.exception("the mcp SDK could not be started")
            self._error = exc
            self._ready.set()
            return
        async with manager.run(), anyio.create_task_group() as tg:
            self._asgi.bind(tg)
            self._ready.set()
            await anyio.sleep_forever()

    def session_stats(self) -> dict[str, Any]:
        """Open sessions of the 2025-11-25 era and their limits (none open before the SDK starts)."""
        return self._asgi.stats() if self._asgi is not None else self.limits.stats()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self._needed.set()
        await self._ready.wait()
        if self._error is not None or self._asgi is None:
            raise RuntimeError("the mcp SDK failed to start") from self._error
        await self._asgi(scope, receive, send)


def _import_sdk() -> None:
    import mcp.server.lowlevel.server
    import mcp.server.streamable_http_manager  # noqa: F401
