"""How envreg's uvicorn servers idle, and who stops them on SIGINT / SIGTERM.

A uvicorn server catches both signals while it serves: right for a process that is one server, wrong for
an embedded one (the runtime's gateway; the local tier's environment server, in the caller's event loop,
where it took the program's Ctrl-C and left the program calling a stopped server) and for a process of
several (an environment server's two planes caught the signal in turn and stopped one after the other).
And it wakes ten times a second to see whether it should stop. `QuietServer` leaves signals to the program
it is in and sleeps while idle; `SignalStop` stops a process's servers all at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Iterator
from types import FrameType, TracebackType
from typing import Any

import uvicorn

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class QuietServer(uvicorn.Server):
    """A uvicorn server that leaves signals to the program it is in (`SignalStop` where the process is its
    servers), and that sleeps while idle: it wakes once a second (its Date header) instead of ten times,
    and at once when told to exit (uvicorn's own loop polls `should_exit` every 0.1 s)."""

    tick_seconds = 1.0
    """How long it sleeps while idle: the resolution of its Date header."""
    _wake: asyncio.Future[None] | None = None

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    @property
    def should_exit(self) -> bool:
        return self._should_exit

    @should_exit.setter
    def should_exit(self, value: bool) -> None:
        self._should_exit = value
        if value and (wake := self._wake) is not None:
            with contextlib.suppress(RuntimeError):  # the loop has closed: nothing is waiting
                wake.get_loop().call_soon_threadsafe(_resolve, wake)  # also from a signal handler

    async def main_loop(self) -> None:
        loop = asyncio.get_running_loop()
        counter = 0  # `on_tick` does its once-a-second work where counter % 10 == 0, as uvicorn counts
        while not await self.on_tick(counter):
            counter = (counter + 10) % 864000
            self._wake = loop.create_future()
            timer = loop.call_later(self.tick_seconds, _resolve, self._wake)
            try:
                await self._wake
            finally:
                timer.cancel()
                self._wake = None


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


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
