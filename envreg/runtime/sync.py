"""Blocking wrappers over the async runtime, for scripts and notebooks."""

from __future__ import annotations

import functools
import inspect
from typing import Any

from anyio.from_thread import BlockingPortal, start_blocking_portal

from envreg.runtime.runtime import Runtime
from envreg.runtime.sandbox import Sandbox


class _Blocking:
    """Exposes an object's coroutine methods as blocking calls through a portal."""

    def __init__(self, target: Any, portal: BlockingPortal) -> None:
        self._target = target
        self._portal = portal

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._target, name)
        if not inspect.iscoroutinefunction(attr):
            return attr

        @functools.wraps(attr)
        def call(*args: Any, **kwargs: Any) -> Any:
            return self._wrap(self._portal.call(functools.partial(attr, *args, **kwargs)))

        return call

    def _wrap(self, value: Any) -> Any:
        if isinstance(value, Sandbox):
            return SyncSandbox(value, self._portal)
        if isinstance(value, list) and value and all(isinstance(v, Sandbox) for v in value):
            return [SyncSandbox(v, self._portal) for v in value]
        return value


class SyncSandbox(_Blocking):
    """A `Sandbox` whose methods block."""

    def __enter__(self) -> SyncSandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class SyncRuntime(_Blocking):
    """`Runtime` with blocking methods: ``with SyncRuntime() as rt: sb = rt.sandbox("calendar")``."""

    def __init__(self, **options: Any) -> None:
        self._portal_cm = start_blocking_portal()
        portal = self._portal_cm.__enter__()
        super().__init__(portal.call(lambda: _make(options)), portal)

    def __enter__(self) -> SyncRuntime:
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self._portal.call(self._target.close)
        finally:
            self._portal_cm.__exit__(None, None, None)


async def _make(options: dict[str, Any]) -> Runtime:
    return Runtime(**options)
