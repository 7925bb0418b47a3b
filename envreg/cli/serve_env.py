"""`envreg serve-env`: run one environment server (agent plane + control plane)."""

from __future__ import annotations

import os
from typing import Annotated

import typer

from envreg.cli.output import fail
from envreg.protocol import AGENT_PORT, CONTROL_PORT, SESSION_IDLE_TIMEOUT


def serve_env(
    env: Annotated[str, typer.Argument(help="Environment folder or name under ./images.")],
    port: Annotated[int, typer.Option(help="Agent plane (MCP) port.")] = AGENT_PORT,
    control_port: Annotated[int, typer.Option(help="Control plane port.")] = CONTROL_PORT,
    token: Annotated[
        str | None,
        typer.Option(help="Control plane bearer token (default: $ENVREG_TOKEN).", show_default=False),
    ] = None,
    host: Annotated[
        str, typer.Option(help="Bind address. Anything but loopback must be asked for.")
    ] = "127.0.0.1",
    max_instances: Annotated[int, typer.Option(help="Most instances held at once.")] = 4096,
    max_body: Annotated[
        int | None,
        typer.Option(
            help="Largest request body in bytes, on both planes (default: from the environment's limits).",
            show_default=False,
        ),
    ] = None,
    snapshot_cache_mb: Annotated[
        int, typer.Option(help="Snapshots kept for restores and forks beyond live instances, in MB.")
    ] = 32,
    fast_path: Annotated[bool, typer.Option(help="Serve tools/list and tools/call on the lean path.")] = True,
    preload_sdk: Annotated[
        bool, typer.Option(help="Import the mcp SDK at start instead of on the first request that needs it.")
    ] = False,
    agent_token: Annotated[
        str | None,
        typer.Option(
            help="Require this bearer token on the MCP agent plane too (default: $ENVREG_AGENT_TOKEN; "
            "sandbox containers always get one, known only to the runtime and its gateway).",
            show_default=False,
        ),
    ] = None,
    agent_socket: Annotated[
        str | None,
        typer.Option(
            help="Also serve the agent plane on a Unix socket at this path (default: $ENVREG_AGENT_SOCKET).",
            show_default=False,
        ),
    ] = None,
    max_sessions: Annotated[
        int | None,
        typer.Option(
            help="Open 2025-11-25 sessions kept at once (default: sized to the memory limit).",
            show_default=False,
        ),
    ] = None,
    max_sessions_per_instance: Annotated[
        int | None,
        typer.Option(
            help="Open sessions kept per instance (default: an eighth of --max-sessions).", show_default=False
        ),
    ] = None,
    session_idle_timeout: Annotated[
        float,
        typer.Option(help="Seconds a session with no request in flight and no open event stream is kept."),
    ] = SESSION_IDLE_TIMEOUT,
) -> None:
    """Serve an environment over MCP streamable HTTP, with a token-protected control plane.

    Images run the same server through `python -m envreg.server`, which starts without the CLI."""
    from envreg.protocol import ENV_AGENT_SOCKET, ENV_AGENT_TOKEN, ENV_TOKEN
    from envreg.server.app import ServerConfig, serve
    from envreg.server.listen import LISTEN_EXIT, CannotListen

    token = token or os.environ.get(ENV_TOKEN)
    if not token:
        raise fail("the control plane needs a token", f"pass --token or set {ENV_TOKEN}", 2)
    config = ServerConfig(
        env=env,
        host=host,
        port=port,
        control_port=control_port,
        token=token,
        max_instances=max_instances,
        max_body=max_body,
        snapshot_budget=snapshot_cache_mb * 1024 * 1024,
        fast_path=fast_path,
        preload_sdk=preload_sdk,
        agent_token=agent_token or os.environ.get(ENV_AGENT_TOKEN) or None,
        agent_socket=agent_socket or os.environ.get(ENV_AGENT_SOCKET) or None,
        max_sessions=max_sessions,
        max_sessions_per_instance=max_sessions_per_instance,
        session_idle_timeout=session_idle_timeout,
    )
    config.session_limits()  # bad limits are refused here, before anything starts
    try:
        serve(config)
    except CannotListen as exc:
        raise fail(exc.message, exc.hint, LISTEN_EXIT) from None


def register(app: typer.Typer) -> None:
    app.command("serve-env")(serve_env)
