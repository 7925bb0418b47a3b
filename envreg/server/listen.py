"""Listening sockets, bound before a server starts: a port that cannot be had is one clear error
(`CannotListen`, exit status 3 from the servers' entry points), never a traceback from inside uvicorn."""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import stat
from collections.abc import Sequence

from envreg.errors import EnvregError

logger = logging.getLogger("envreg.server")

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


def listen_unix(path: str, backlog: int = BACKLOG) -> socket.socket | None:
    """A Unix socket listening at `path` that any local user may connect to (the folder holding it says who
    can reach it), or None, with a warning saying why, when it cannot be had: a server serves its ports
    whether or not it also has this shorter way in (the gateway then uses the port)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        with contextlib.suppress(FileNotFoundError):
            if stat.S_ISSOCK(os.lstat(path).st_mode) and not _answers(path):  # an earlier server's
                os.unlink(path)
        sock.bind(path)
        os.chmod(path, 0o666)
        sock.listen(backlog)
    except OSError as exc:
        sock.close()
        why = os.strerror(exc.errno) if exc.errno else str(exc)
        logger.warning("not serving the agent plane on %s: %s (its port still serves it)", path, why)
        return None
    return sock


def _answers(path: str) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(path)
        except OSError:
            return False
    return True


def listen_all(host: str, ports: Sequence[int], agent_socket: str | None = None) -> list[socket.socket]:
    """A listening socket on each port, or none (those bound are closed) and `CannotListen`; then, with
    `agent_socket`, one at that path when it can be had (`listen_unix`)."""
    sockets: list[socket.socket] = []
    try:
        for port in ports:
            sockets.append(listen(host, port))
    except CannotListen:
        for sock in sockets:
            sock.close()
        raise
    unix = listen_unix(agent_socket) if agent_socket else None
    return [*sockets, unix] if unix is not None else sockets


__all__ = ["BACKLOG", "LISTEN_EXIT", "CannotListen", "listen", "listen_all", "listen_unix"]
