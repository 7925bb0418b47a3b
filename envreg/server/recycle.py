"""Recyclable servers: a parent that loaded the environment forks a fresh server process per sandbox.

With ``ENVREG_RECYCLE=1`` (the Docker backend sets it when the runtime keeps containers for reuse),
``python -m envreg.server`` binds both ports, imports the server and the environment, and forks a child
that serves them. ``POST /recycle`` on the control plane ends that child; the parent empties the temp
folder and forks another from its own memory, which never served a request: nothing the last sandbox
did survives (instances, snapshots, module globals, files in /tmp). The new child accepts on the same
listening sockets, so connections made meanwhile wait in their backlog. A child that ends any other
way (a crash, an OOM kill) ends the parent with its status, so the container ends as it did before.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from envreg.env import Environment

RECYCLE_EXIT = 75
"""A child's exit status that asks its parent for a fresh one."""
BACKLOG = 2048
SIGNALS = (signal.SIGTERM, signal.SIGINT)


def listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket, bound before any child is forked."""
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    return socket.create_server((host, port), family=family, backlog=BACKLOG)


def empty(folder: Path) -> None:
    """Remove what is inside `folder` (what the process may remove), keeping the folder."""
    for entry in folder.iterdir() if folder.is_dir() else ():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)


def end_for_recycle() -> None:
    """`POST /recycle`: end this process right after its answer is written (nothing in it is kept, so
    nothing needs a graceful stop); the parent forks the next."""
    import asyncio

    asyncio.get_running_loop().call_later(0.001, _exit_for_recycle)


def _exit_for_recycle() -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(RECYCLE_EXIT)


def serve_recyclable(
    serve_child: Callable[[list[socket.socket], int], None], host: str, ports: tuple[int, ...]
) -> int:
    """Fork children running `serve_child(sockets, generation)`, one after the other, while they end
    for a recycle; returns the exit status of the first that ends otherwise (128 + N for signal N)."""
    sockets = [listen(host, port) for port in ports]
    child = generation = stopping = 0

    def forward(signum: int, _: object) -> None:
        nonlocal stopping
        stopping = signum  # also while a child ends for a recycle: no next child then
        if child:
            with contextlib.suppress(ProcessLookupError):  # it ended (and was reaped) meanwhile
                os.kill(child, signum)

    for signum in SIGNALS:
        signal.signal(signum, forward)
    while not stopping:
        signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)  # none may land between fork and knowing the child
        child = os.fork()
        if child == 0:
            code = 1
            try:
                for signum in SIGNALS:
                    signal.signal(signum, signal.SIG_DFL)
                signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)
                serve_child(sockets, generation)
                code = 0
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)
        if stopping:  # a signal came before the child was known
            os.kill(child, stopping)
        _, status = os.waitpid(child, 0)
        child = 0
        code = os.waitstatus_to_exitcode(status)
        if code != RECYCLE_EXIT:
            return 128 + stopping if stopping else code if code >= 0 else 128 - code
        empty(Path(tempfile.gettempdir()))
        generation += 1
    return 128 + stopping


def prepare(env: Environment) -> None:
    """Import and build in the parent what every child would while starting or on its first calls (the
    tools' models, built on first use in a plain server), so that children start at once."""
    env.list_tools()
    import uvicorn.lifespan.off
    import uvicorn.protocols.http.h11_impl

    try:
        import uvicorn.loops.uvloop
        import uvicorn.protocols.http.httptools_impl  # noqa: F401
    except ImportError:
        pass


__all__ = ["RECYCLE_EXIT", "end_for_recycle", "prepare", "serve_recyclable"]
