"""Warm pools per image digest: ready containers (container tier) and ready instances (instance tier)."""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Callable

import anyio
import httpx2

from envreg.runtime.docker_backend import DockerBackend, EnvContainer
from envreg.runtime.errors import EngineError
from envreg.runtime.remote import EnvClient

logger = logging.getLogger("envreg.runtime")
READY_TIMEOUT = 120.0
CONCURRENT_STARTS = 8


class Pools:
    """Holds warm capacity for both Docker tiers and starts more in the background when it runs low.

    `sizes(image)` gives the number of warm units to keep for an image on a tier.
    """

    def __init__(
        self,
        backend: DockerBackend,
        http: httpx2.AsyncClient,
        sizes: Callable[[str, str], int],
        instances_per_container: int = 256,
    ) -> None:
        self.backend = backend
        self.http = http
        self.sizes = sizes
        self.instances_per_container = instances_per_container
        self.warm_containers: dict[str, list[EnvContainer]] = defaultdict(list)
        self.shared: dict[str, list[EnvContainer]] = defaultdict(list)
        self.warm_instances: dict[str, list[tuple[EnvContainer, str]]] = defaultdict(list)
        self._refilling: set[tuple[str, str]] = set()
        self._task_group: anyio.abc.TaskGroup | None = None
        self._shared_lock = anyio.Lock()
        self._starts = anyio.Semaphore(CONCURRENT_STARTS)

    def bind(self, task_group: anyio.abc.TaskGroup) -> None:
        self._task_group = task_group

    def client(self, container: EnvContainer) -> EnvClient:
        return EnvClient(self.http, container.agent_url, container.control_url, container.token)

    async def start_container(self, image: str, isolation: str) -> EnvContainer:
        """A new container, once its server answers (a few start at once: more only thrash the CPUs)."""
        async with self._starts:
            return await self._start_container(image, isolation)

    async def _start_container(self, image: str, isolation: str) -> EnvContainer:
        container = await anyio.to_thread.run_sync(self.backend.start, image, isolation)
        client = self.client(container)
        deadline = time.monotonic() + READY_TIMEOUT
        while True:
            try:
                await client.healthz()
                return container
            except (httpx2.TransportError, RuntimeError):
                if time.monotonic() > deadline:
                    status = await anyio.to_thread.run_sync(self.backend.status, container)
                    await anyio.to_thread.run_sync(self.backend.remove, container)
                    raise EngineError(
                        f"{image} did not become ready within {READY_TIMEOUT:.0f}s ({status})"
                    ) from None
                if await anyio.to_thread.run_sync(self.backend.status, container) != "running":
                    logs = container.container.logs(tail=20).decode(errors="replace")
                    await anyio.to_thread.run_sync(self.backend.remove, container)
                    raise EngineError(f"{image} exited while starting:\n{logs}") from None
                await anyio.sleep(0.02)

    # container tier ---------------------------------------------------------------------------
    async def acquire_container(self, image: str) -> EnvContainer:
        warm = self.warm_containers[image]
        container = warm.pop() if warm else None
        self._schedule_refill(image, "container")
        return container or await self.start_container(image, "container")

    # instance tier ----------------------------------------------------------------------------
    async def acquire_instance(self, image: str) -> tuple[EnvContainer, str]:
        warm = self.warm_instances[image]
        unit = warm.pop() if warm else None
        self._schedule_refill(image, "instance")
        return unit or await self._new_instance(image)

    async def _new_instance(self, image: str) -> tuple[EnvContainer, str]:
        async with self._shared_lock:
            host = next(
                (c for c in self.shared[image] if len(c.instances) < self.instances_per_container), None
            )
            if host is None:
                host = await self.start_container(image, "instance")
                self.shared[image].append(host)
            instance_id = await self.client(host).create_instance()
            host.instances.add(instance_id)
        return host, instance_id

    async def release_instance(self, host: EnvContainer, instance_id: str) -> None:
        host.instances.discard(instance_id)
        try:
            await self.client(host).delete_instance(instance_id)
        except Exception as exc:  # the container may already be gone; nothing is left to free
            logger.debug("deleting instance %s: %s", instance_id, exc)

    # refill -----------------------------------------------------------------------------------
    async def prewarm(self, image: str, isolation: str, n: int) -> None:
        """Bring the warm pool for `image` on `isolation` up to `n` now."""
        if isolation == "container":
            pool = self.warm_containers[image]
            missing = n - len(pool)
            if missing > 0:
                async with anyio.create_task_group() as tg:
                    for _ in range(missing):
                        tg.start_soon(self._add_warm_container, image)
        else:
            while len(self.warm_instances[image]) < n:
                self.warm_instances[image].append(await self._new_instance(image))

    async def _add_warm_container(self, image: str) -> None:
        self.warm_containers[image].append(await self.start_container(image, "container"))

    def _schedule_refill(self, image: str, isolation: str) -> None:
        key = (image, isolation)
        target = self.sizes(image, isolation)
        if target <= 0 or key in self._refilling or self._task_group is None:
            return
        self._refilling.add(key)

        async def refill() -> None:
            try:
                await self.prewarm(image, isolation, target)
            except Exception:
                logger.exception("refilling the %s pool of %s", isolation, image)
            finally:
                self._refilling.discard(key)

        self._task_group.start_soon(refill)

    def drain(self) -> list[EnvContainer]:
        """Every container the pools hold (warm or shared), forgotten by the pools."""
        held = [c for pool in self.warm_containers.values() for c in pool]
        held += [c for pool in self.shared.values() for c in pool]
        self.warm_containers.clear()
        self.shared.clear()
        self.warm_instances.clear()
        return held
