"""`Runtime`: leases sandboxes on an isolation tier, forks them from snapshots, cleans up on exit."""

from __future__ import annotations

from functools import cache
from typing import Any, Literal

import anyio

from envreg.env import Environment, load_environment
from envreg.runtime.sandbox import LocalSandbox, Sandbox
from envreg.runtime.snapshots import Snapshot, SnapshotStore

Isolation = Literal["local", "instance", "container"]


@cache
def environment_digest(env: Environment) -> str:
    """The manifest digest that names an environment's exact code, schema and seed."""
    from envreg.manifest import build_manifest

    return build_manifest(env).digest


class Runtime:
    """Entry point for trainers.

    ```python
    async with Runtime() as rt:
        sb = await rt.sandbox("calendar", isolation="local")
        await sb.call_tool("list_events", {"day": "2026-01-05"})
        forks = await rt.fork(await sb.snapshot(), 8)
    ```
    """

    def __init__(self, snapshots: SnapshotStore | None = None) -> None:
        self.snapshots = snapshots or SnapshotStore()
        self.sandboxes: dict[str, Sandbox] = {}
        self._environments: dict[str, Environment] = {}

    async def __aenter__(self) -> Runtime:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def sandbox(
        self,
        env: str | Environment,
        *,
        isolation: Isolation = "local",
        state: dict[str, Any] | Snapshot | None = None,
    ) -> Sandbox:
        """Lease a sandbox of `env` (a folder, a name under ./images, or an `Environment`)."""
        environment = env if isinstance(env, Environment) else load_environment(env)
        if isolation != "local":
            raise NotImplementedError(
                f"isolation={isolation!r} needs the Docker backend, which is not built yet"
            )
        digest = environment_digest(environment)
        self._environments[digest] = environment
        initial = None
        if isinstance(state, Snapshot):
            state.check_compatible(environment.name, digest)
            initial = state.state
        elif state is not None:
            initial = state
        sandbox = LocalSandbox(self, environment.instance(initial), digest)
        self.sandboxes[sandbox.id] = sandbox
        return sandbox

    async def fork(
        self, snapshot: Snapshot | str, n: int, *, isolation: Isolation = "local"
    ) -> list[Sandbox]:
        """`n` new sandboxes that all start from `snapshot`."""
        snap = self.snapshots.get(snapshot) if isinstance(snapshot, str) else snapshot
        environment = self._environments.get(snap.env_digest) or load_environment(snap.env)
        return [await self.sandbox(environment, isolation=isolation, state=snap) for _ in range(n)]

    def _forget(self, sandbox: Sandbox) -> None:
        self.sandboxes.pop(sandbox.id, None)

    async def close(self) -> None:
        """Release every sandbox this runtime still holds."""
        async with anyio.create_task_group() as tg:
            for sandbox in list(self.sandboxes.values()):
                tg.start_soon(sandbox.close)
