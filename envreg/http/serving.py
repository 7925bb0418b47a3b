"""Who stops envreg's uvicorn servers on SIGINT / SIGTERM.

A uvicorn server catches both signals while it serves: right for a process that is one server, wrong for
an embedded one (the runtime's gateway; the local tier's environment server, in the caller's event loop,
where it took the program's Ctrl-C and left the program calling a stopped server) and for a process of
several (an environment server's two planes caught the signal in turn and stopped one after the other).
`QuietServer` leaves signals to the program it is in; `SignalStop` stops a process's servers all at once.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from types import FrameType, TracebackType
from typing import Any

import uvicorn

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class QuietServer(uvicorn.Server):
    """A uvicorn server that leaves the host process's signal handlers alone (it is embedded)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class SignalStop:
    """While entered (on the main thread): SIGINT or SIGTERM stops every server added, at once; a second
    SIGINT stops them without waiting for open connections. On exit the handlers before it are back and
    each signal caught is raised again, so the process ends as that signal ends it (as uvicorn does)."""

    def __init__(self) -> None:
        self.caught: list[int] = []
        self._servers: list[uvicorn.Server] = []
        self._before: dict[int, Any] = {}

    def add(self, server: uvicorn.Server) -> None:
        """Stop `server` on a signal; at once if one came before it was added."""
        self._servers.append(server)
        if self.caught:
            server.should_exit = True

    def _handle(self, signum: int, _: FrameType | None) -> None:
        force = signal.SIGINT in self.caught and signum == signal.SIGINT
        self.caught.append(signum)
        for server in self._servers:
            server.should_exit = True
            server.force_exit = server.force_exit or force

    def __enter__(self) -> SignalStop:
        self._before = {signum: signal.signal(signum, self._handle) for signum in SIGNALS}
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        for signum, handler in self._before.items():
            signal.signal(signum, handler)
        if kind is None:
            for signum in dict.fromkeys(reversed(self.caught)):
                signal.raise_signal(signum)


__all__ = ["SIGNALS", "QuietServer", "SignalStop"]
