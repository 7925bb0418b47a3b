"""`Background`: a `Runtime` on an event loop of its own (a daemon thread), for trainers' threads and loops.

Trainers call tools from their own event loops (verl's agent loop workers, verifiers) or from plain
threads (TRL's tool calls): `run` awaits work on the runtime's loop from any other loop without
blocking it, `call` blocks a thread until it is done. `shared(...)` is one per process and options,
closed at exit.
"""

from __future__ import annotations

import asyncio
import atexit
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from envreg.runtime import Runtime

T = TypeVar("T")
_lock = threading.Lock()
_shared: dict[str, Background] = {}


class Background:
    """A runtime in a daemon thread; `runtime` is only to be used from the functions given to `run`/`call`."""

    def __init__(self, **runtime_options: Any) -> None:
        self.options = runtime_options
        self._runtime: Runtime | None = None
        self._portal_cm: Any = None
        self._portal: Any = None
        self._runtime_cm: Any = None

    def start(self) -> Background:
        from anyio.from_thread import start_blocking_portal

        self._portal_cm = start_blocking_portal()
        self._portal = self._portal_cm.__enter__()
        self._runtime_cm = self._portal.wrap_async_context_manager(Runtime(**self.options))
        self._runtime = self._runtime_cm.__enter__()
        return self

    @property
    def runtime(self) -> Runtime:
        if self._runtime is None:
            raise RuntimeError("the background runtime is not started: call start() first")
        return self._runtime

    def call(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        """Run ``await fn(*args)`` on the runtime's loop; block this thread until it is done."""
        return self._portal.call(fn, *args)

    async def run(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        """Run ``await fn(*args)`` on the runtime's loop, awaited from another asyncio loop."""
        return await asyncio.wrap_future(self._portal.start_task_soon(fn, *args))

    def close(self) -> None:
        if self._portal is None:
            return
        try:
            self._runtime_cm.__exit__(None, None, None)
        finally:
            self._portal_cm.__exit__(None, None, None)
            self._portal = self._portal_cm = self._runtime_cm = self._runtime = None


def shared(**runtime_options: Any) -> Background:
    """The process's background runtime for these options (started on first use, closed at exit)."""
    key = repr(sorted(runtime_options.items()))
    with _lock:
        if key not in _shared:
            if not _shared:
                atexit.register(close_shared)
            _shared[key] = Background(**runtime_options).start()
        return _shared[key]


def close_shared() -> None:
    """Close every shared background runtime (and its sandboxes)."""
    with _lock:
        backgrounds = list(_shared.values())
        _shared.clear()
    for background in backgrounds:
        background.close()
