"""Placement: a dedicated server per sandbox, or an instance on a shared server; and warm capacity for both.

This is the only place the isolation tiers differ: ``container`` places each sandbox on a dedicated
server (its default instance), ``instance`` and ``local`` create an instance on a shared server.
Warm pools per environment key keep ready servers (dedicated) or ready instances (shared), refilled in
the background after each acquire.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable

import anyio

from envreg.errors import LimitReached
from envreg.protocol import DEFAULT_INSTANCE
from envreg.runtime.backends.base import Backend, EnvSpec, Server

logger = logging.getLogger("envreg.runtime")
Unit = tuple[Server, str]


class Placement:
    """Places sandboxes on one backend's servers and keeps warm capacity per (environment, placement).

    `sizes(spec_key, dedicated)` gives the number of warm units to keep. With `recycle`, a dedicated
    server whose sandbox ended goes back to its warm pool (up to `recycle` per environment, or its
    size if larger) once the backend made it fresh (`Backend.recycle`), instead of being stopped.
    """

    def __init__(
        self,
        backend: Backend,
        sizes: Callable[[str, bool], int],
        instances_per_server: int = 256,
        recycle: int = 0,
    ) -> None:
        self.backend = backend
        self.sizes = sizes
        self.instances_per_server = instances_per_server
        self.recycle = recycle
        self._recycling: dict[str, int] = defaultdict(int)
        self.warm: dict[tuple[str, bool], list[Unit]] = defaultdict(list)
        self.shared: dict[str, list[Server]] = defaultdict(list)
        self._refilling: set[tuple[str, bool]] = set()
        self._task_group: anyio.abc.TaskGroup | None = None
        self._shared_lock = anyio.Lock()

    def bind(self, task_group: anyio.abc.TaskGroup) -> None:
        self._task_group = task_group

    async def acquire(self, spec: EnvSpec, dedicated: bool) -> Unit:
        """A server and the instance on it for one new sandbox."""
        warm = self.warm[spec.key, dedicated]
        unit = warm.pop() if warm else None
        self._schedule_refill(spec, dedicated)
        return unit or await self._new(spec, dedicated)

    async def release(self, server: Server, instance_id: str) -> None:
        """Free a sandbox's place: stop its dedicated server, or delete its instance on a shared one."""
        server.instances.discard(instance_id)
        if server.dedicated:
            if not await self._recycled(server):
                await self.backend.stop(server)
            return
        try:
            await server.client.delete_instance(instance_id)
        except Exception as exc:  # the server may already be gone; nothing is left to free
            logger.debug("deleting instance %s: %s", instance_id, exc)

    async def _recycled(self, server: Server) -> bool:
        """Put a dedicated server back in its warm pool, made fresh, when the pool has room for it."""
        key = server.spec.key
        pool = self.warm[key, True]
        room = max(self.recycle, self.sizes(key, True)) if self.recycle else 0
        if len(pool) + self._recycling[key] >= room:
            return False
        self._recycling[key] += 1
        try:
            if not await self.backend.recycle(server):
                return False
        finally:
            self._recycling[key] -= 1
        server.snapshots.clear()  # the new process keeps none
        server.instances = {DEFAULT_INSTANCE}
        pool.append((server, DEFAULT_INSTANCE))
        return True

    async def _new(self, spec: EnvSpec, dedicated: bool) -> Unit:
        if dedicated:
            server = await self.backend.start(spec, dedicated=True)
            server.instances.add(DEFAULT_INSTANCE)
            return server, DEFAULT_INSTANCE
        async with self._shared_lock:
            for server in [s for s in self.shared[spec.key] if len(s.instances) < self.instances_per_server]:
                try:  # a server whose states fill its memory budget refuses: place it elsewhere
                    instance_id = await server.client.create_instance()
                except LimitReached as exc:
                    logger.info("%s: %s; trying another server", spec.name, exc)
                    continue
                server.instances.add(instance_id)
                return server, instance_id
            server = await self.backend.start(spec, dedicated=False)
            self.shared[spec.key].append(server)
            instance_id = await server.client.create_instance()
            server.instances.add(instance_id)
        return server, instance_id

    def forget(self, server: Server) -> None:
        """Drop a dead server from the shared and warm lists."""
        if server in self.shared.get(server.spec.key, []):
            self.shared[server.spec.key].remove(server)
        for units in self.warm.values():
            units[:] = [u for u in units if u[0] is not server]

    # warm pools -------------------------------------------------------------------------------
    async def prewarm(self, spec: EnvSpec, dedicated: bool, n: int) -> None:
        """Bring the warm pool of `spec` up to `n` units now."""
        pool = self.warm[spec.key, dedicated]
        if dedicated:
            missing = n - len(pool)
            if missing > 0:
                async with anyio.create_task_group() as tg:
                    for _ in range(missing):
                        tg.start_soon(self._add_warm, spec, dedicated)
        else:
            while len(pool) < n:
                pool.append(await self._new(spec, dedicated))

    async def _add_warm(self, spec: EnvSpec, dedicated: bool) -> None:
        self.warm[spec.key, dedicated].append(await self._new(spec, dedicated))

    def _schedule_refill(self, spec: EnvSpec, dedicated: bool) -> None:
        key = (spec.key, dedicated)
        target = self.sizes(spec.key, dedicated)
        if target <= 0 or key in self._refilling or self._task_group is None:
            return
        self._refilling.add(key)

        async def refill() -> None:
            try:
                await self.prewarm(spec, dedicated, target)
            except Exception:
                logger.exception("refilling the warm pool of %s", spec.name)
            finally:
                self._refilling.discard(key)

        self._task_group.start_soon(refill)

    def servers(self) -> list[Server]:
        """Every server the pools hold (warm or shared)."""
        held = {id(u[0]): u[0] for units in self.warm.values() for u in units}
        held.update({id(s): s for servers in self.shared.values() for s in servers})
        return list(held.values())
