"""The runtime daemon: a REST control API (OpenAPI) and the MCP gateway on one port, for trainers in any language."""

from envreg.daemon.app import DaemonApp, DaemonSettings, create_api, create_app
from envreg.daemon.serve import DaemonConfig, daemon_file, read_daemon_file, run_daemon, serve

__all__ = [
    "DaemonApp",
    "DaemonConfig",
    "DaemonSettings",
    "create_api",
    "create_app",
    "daemon_file",
    "read_daemon_file",
    "run_daemon",
    "serve",
]
