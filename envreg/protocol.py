"""Protocol facts, written once: MCP versions, ports, URL paths, image and container labels, tiers."""

from __future__ import annotations

from typing import Literal

# --- MCP -----------------------------------------------------------------------------------------
MCP_VERSION = "2026-07-28"
"""The sessionless protocol the lean path and the runtime's own client speak."""
MCP_SESSION_VERSION = "2025-11-25"
"""The session era (``Mcp-Session-Id``), served by the `mcp` SDK."""
META_PROTOCOL_VERSION = "io.modelcontextprotocol/protocolVersion"
META_CLIENT_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
META_CLIENT_INFO = "io.modelcontextprotocol/clientInfo"
META_SERVER_INFO = "io.modelcontextprotocol/serverInfo"

# --- the environment server ----------------------------------------------------------------------
AGENT_PORT = 8000
CONTROL_PORT = 8001
DEFAULT_INSTANCE = "default"
ENV_TOKEN = "ENVREG_TOKEN"
"""Environment variable holding the control plane's bearer token inside an image."""
ENV_AGENT_TOKEN = "ENVREG_AGENT_TOKEN"
"""Environment variable holding the agent plane's secret inside an image (only the gateway knows it)."""
ENV_AGENT_SOCKET = "ENVREG_AGENT_SOCKET"
"""Environment variable: also serve the agent plane on a Unix socket at this path (the gateway's way into a
sandbox container, through a folder the host shares with it alone)."""
AGENT_SOCKET_DIR = "/run/envreg"
"""Where a sandbox container sees that folder; its server's socket is `agent.sock` in it."""
ENV_RECYCLE = "ENVREG_RECYCLE"
"""Set to 1 in an image: the server can be recycled (`POST /recycle`: a fresh process, see `envreg.server.recycle`)."""
GENERATION_HEADER = "x-envreg-generation"
"""Which process of a recyclable server a request is for (its sandbox's lease): any other refuses it (410)."""
SESSION_IDLE_TIMEOUT = 60.0
"""Seconds a 2025-11-25 session with no request in flight and no open event stream is kept."""

# --- HTTP keep-alive -------------------------------------------------------------------------------
KEEP_ALIVE_SECONDS = 60
"""How long every port envreg serves (environment server, gateway, daemon) promises to keep an idle
connection open: its answers say ``Keep-Alive: timeout=60``."""
KEEP_ALIVE_GRACE = 15
"""How much later than it promised a port closes an idle connection, so that a client reusing one at the
promised time (a timer that fires late on a busy machine) never meets a connection being closed."""
UPSTREAM_IDLE_SECONDS = 30.0
"""How long the gateway keeps an idle connection to an environment server: well within its promise."""


def agent_path(instance_id: str) -> str:
    """The MCP endpoint of an instance on its environment server."""
    return "/mcp" if instance_id == DEFAULT_INSTANCE else f"/i/{instance_id}/mcp"


# --- the gateway ---------------------------------------------------------------------------------
GATEWAY_PREFIX = "/sandboxes/"


def gateway_path(sandbox_id: str) -> str:
    """A sandbox's MCP endpoint on the gateway (the daemon's port, or a runtime's own gateway)."""
    return f"{GATEWAY_PREFIX}{sandbox_id}/mcp"


# --- labels --------------------------------------------------------------------------------------
LABEL = "io.envreg"
NAME_LABEL = f"{LABEL}.name"
VERSION_LABEL = f"{LABEL}.version"
MANIFEST_DIGEST_LABEL = f"{LABEL}.manifest.digest"
MANAGED_LABEL = f"{LABEL}.managed"
RUNTIME_LABEL = f"{LABEL}.runtime"
LEASE_LABEL = f"{LABEL}.lease"
EXPIRES_LABEL = f"{LABEL}.expires"
ISOLATION_LABEL = f"{LABEL}.isolation"
KEEPER_LABEL = f"{LABEL}.keeper"
TOOLS_LABEL = f"{LABEL}.tools"
"""Optional on an image: comma-separated tool names (lets search skip the manifest fetch)."""

# --- isolation tiers -----------------------------------------------------------------------------
Isolation = Literal["local", "instance", "container"]
TIERS: tuple[Isolation, ...] = ("local", "instance", "container")
SHARED_TIERS = frozenset({"local", "instance"})
"""Tiers whose sandboxes are instances on a shared server; the others get a dedicated server each."""

DEFAULT_GRACE = 30.0
"""Seconds a runtime's keeper must have been gone before `envreg gc` removes what it left."""

__all__ = [
    "AGENT_PORT",
    "AGENT_SOCKET_DIR",
    "CONTROL_PORT",
    "DEFAULT_GRACE",
    "DEFAULT_INSTANCE",
    "GATEWAY_PREFIX",
    "MCP_SESSION_VERSION",
    "MCP_VERSION",
    "SHARED_TIERS",
    "TIERS",
    "Isolation",
    "agent_path",
    "gateway_path",
]

#: a file in an environment folder that marks it as foreign code (an imported EnvFactory tool file): envreg
#: imports such a folder only inside a container sandbox or its image, where ENVREG_FOREIGN_CODE=allow
FOREIGN_MARKER = "foreign.json"
ENV_FOREIGN_CODE = "ENVREG_FOREIGN_CODE"
