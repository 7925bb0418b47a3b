"""Recyclable servers: a parent that loaded the environment forks a fresh server process per sandbox.

With ``ENVREG_RECYCLE=1`` (the Docker backend sets it when the runtime keeps containers for reuse),
``python -m envreg.server`` binds both ports, imports the server and the environment, and forks a child
that serves them. ``POST /recycle`` on the control plane ends that child; the parent empties the temp
folder and forks another from its own memory, which never served a request: nothing the last sandbox
did survives (instances, snapshots, module globals, files in /tmp). The new child accepts on the same
listening sockets, so connections made meanwhile wait in their backlog. A child that ends any other
way (a crash, an OOM kill) ends the parent with its status, so the container ends as it did before.

Each child serves one sandbox's lease, named by its generation: the runtime sends it with every request
(``X-Envreg-Generation``), and a child refuses (410) a request for another generation, so a call the last
sandbox had in flight can never land in the next one. Once `/recycle` is asked, the child takes no new
request (410, but `GET /healthz`), lets those in flight finish (at most `DRAIN_SECONDS`) and ends. Between
children the parent also removes what the last one left: the temp folder's content (made writable first),
the `/dev/shm` entries made since the parent started, and every process left over (the parent is their
subreaper, so none escapes by daemonizing).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import socket
import stat
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envreg.protocol import GENERATION_HEADER
from envreg.server.listen import listen_all

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Receive, Scope, Send

    from envreg.env import Environment

RECYCLE_EXIT = 75
"""A child's exit status that asks its parent for a fresh one."""
SIGNALS = (signal.SIGTERM, signal.SIGINT)
DRAIN_SECONDS = 5.0
"""How long a child ending for a recycle waits for the requests it took before the recycle began."""
ENV_SHM = "ENVREG_RECYCLE_SHM"
"""The shared-memory folder to clean between children: `/dev/shm` when the server is its container's
init (PID 1, as images run it); elsewhere only where this names one (tests), never a host's own."""
_PR_SET_CHILD_SUBREAPER = 36
_HEADER = GENERATION_HEADER.encode()


class Lease:
    """What a child serves: its `generation`; `closing` once a recycle began; requests `in_flight`."""

    def __init__(self, generation: int) -> None:
        self.generation = generation
        self.closing = False
        self.in_flight = 0

    def refusal(self, scope: Scope) -> str | None:
        """Why this child must not take a request, or None."""
        pinned = next((v for k, v in scope["headers"] if k == _HEADER), None)
        if pinned is not None and pinned != str(self.generation).encode():
            return (
                f"this environment server was recycled for another sandbox (generation {self.generation}, "
                f"the request was for {pinned.decode(errors='replace')[:20]}): the sandbox it was for has "
                "ended, and the request was not carried out"
            )
        if self.closing and not (scope["method"] == "GET" and scope["path"] == "/healthz"):
            return "the sandbox this environment server holds has ended: the request was not carried out"
        return None


class LeaseGuard:
    """ASGI middleware: a request `Lease.refusal` names gets 410 (a JSON-RPC error on the agent plane
    when `mcp`); the others are counted while in flight, so that a recycle waits for them."""

    def __init__(self, app: ASGIApp, lease: Lease, *, mcp: bool) -> None:
        self.app = app
        self.lease = lease
        self.mcp = mcp

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        why = self.lease.refusal(scope)
        if why is not None:
            from envreg.http.asgi import send_error
            from envreg.http.jsonrpc import mcp_call

            call = mcp_call(scope, None) if self.mcp else (False, None)
            await send_error(send, 410, why, call=call, data={"state": "ended"} if call[0] else None)
            return
        self.lease.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.lease.in_flight -= 1


def _writable(function: Any, path: str, _: object) -> None:
    """`shutil.rmtree`'s error handler: make the folder holding `path` (and `path`) writable, retry once."""
    with contextlib.suppress(OSError):
        os.chmod(os.path.dirname(path), stat.S_IRWXU)
        if os.path.isdir(path) and not os.path.islink(path):
            os.chmod(path, stat.S_IRWXU)
            shutil.rmtree(path, ignore_errors=True)
        else:
            function(path)


def remove(entry: Path) -> None:
    """Remove a file, link or folder tree, also one the last child made unwritable."""
    if entry.is_dir() and not entry.is_symlink():
        with contextlib.suppress(OSError):
            entry.chmod(stat.S_IRWXU)
        shutil.rmtree(entry, onerror=_writable)
    else:
        with contextlib.suppress(OSError):
            entry.unlink(missing_ok=True)


def empty(folder: Path, keep: frozenset[str] = frozenset()) -> None:
    """Remove what is inside `folder` (what the process may remove) but the names in `keep`."""
    for entry in folder.iterdir() if folder.is_dir() else ():
        if entry.name not in keep:
            remove(entry)


def entries(folder: Path) -> frozenset[str]:
    """The names in `folder` now (none when it is not there or cannot be read)."""
    try:
        return frozenset(e.name for e in folder.iterdir())
    except OSError:
        return frozenset()


def shared_memory() -> Path | None:
    """The shared-memory folder this server may clean between children (`ENV_SHM`), or None."""
    named = os.environ.get(ENV_SHM)
    if named:
        return Path(named)
    return Path("/dev/shm") if os.getpid() == 1 else None


def become_subreaper() -> None:
    """Make orphaned descendants children of this process (Linux), so that `end_strays` finds them."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def children() -> list[int]:
    """This process's children, from /proc (empty where there is none)."""
    me, found = os.getpid(), []
    for task in Path("/proc").glob("[0-9]*"):
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == me:
            found.append(int(task.name))
    return found


def end_strays() -> None:
    """Kill and reap every process the last child left behind (they are this process's children now)."""
    for _ in range(100):
        left = children()
        if not left:
            return
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for pid in left:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)


def end_for_recycle(lease: Lease) -> None:
    """`POST /recycle`: take no new request, and end this process once those in flight are answered
    (at most `DRAIN_SECONDS`), right after the recycle's own answer is written; the parent forks the next."""
    import asyncio

    lease.closing = True
    loop = asyncio.get_running_loop()
    deadline = time.monotonic() + DRAIN_SECONDS

    def check() -> None:
        if lease.in_flight > 0 and time.monotonic() < deadline:
            loop.call_later(0.002, check)
        else:
            loop.call_later(0.001, _exit_for_recycle)

    loop.call_later(0.001, check)


def _exit_for_recycle() -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(RECYCLE_EXIT)


def serve_recyclable(
    serve_child: Callable[[list[socket.socket], int], None],
    host: str,
    ports: tuple[int, ...],
    agent_socket: str | None = None,
) -> int:
    """Fork children running `serve_child(sockets, generation)`, one after the other, while they end
    for a recycle; returns the exit status of the first that ends otherwise (128 + N for signal N)."""
    sockets = listen_all(host, ports, agent_socket)  # before any child is forked
    child = generation = stopping = 0
    become_subreaper()
    shm = shared_memory()
    shm_before = entries(shm) if shm else frozenset()

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
        end_strays()
        empty(Path(tempfile.gettempdir()))
        if shm:
            empty(shm, shm_before)
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


__all__ = ["RECYCLE_EXIT", "Lease", "LeaseGuard", "end_for_recycle", "prepare", "serve_recyclable"]
