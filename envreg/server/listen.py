"""Listening sockets, bound before a server starts: a port that cannot be had is one clear error
(`CannotListen`, exit status 3 from the servers' entry points), never a traceback from inside uvicorn."""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence

from envreg.errors import EnvregError

BACKLOG = 2048
LISTEN_EXIT = 3
"""Exit status of `envreg serve-env`, `python -m envreg.server` and `envreg daemon` when a port is taken."""


ONE_PORT_HINT = "stop what holds that port or pick another --port (0: any free one)"
"""The hint for a server with one port (the daemon, `envreg reward serve`)."""


class CannotListen(EnvregError):
    """A port to serve on is taken (or not ours to bind)."""

    status = 409


def listen(host: str, port: int, backlog: int = BACKLOG) -> socket.socket:
    """A TCP socket listening on `host`:`port` (0: any free port), or `CannotListen` saying why not."""
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        return socket.create_server((host, port), family=family, backlog=backlog)
    except OSError as exc:
        why = os.strerror(exc.errno) if exc.errno else str(exc)
        raise CannotListen(
            f"cannot listen on {host}:{port}: {why}",
            "stop what holds that port or pick another --port / --control-port (0: any free one)",
        ) from None


def listen_all(host: str, ports: Sequence[int]) -> list[socket.socket]:
    """A listening socket on each port, or none (those bound are closed) and `CannotListen`."""
    sockets: list[socket.socket] = []
    try:
        for port in ports:
            sockets.append(listen(host, port))
    except CannotListen:
        for sock in sockets:
            sock.close()
        raise
    return sockets


__all__ = ["BACKLOG", "LISTEN_EXIT", "CannotListen", "listen", "listen_all"]
