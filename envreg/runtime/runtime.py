"""`Runtime`: leases sandboxes on an isolation tier, forks them from snapshots, and never leaks one."""

from __future__ import annotations

import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from contextlib import AsyncExitStack
from functools import cache
from typing import Any, Literal

import anyio
import httpx2

from envreg.env import Environment, load_environment
from envreg.runtime.sandbox import LocalSandbox, RemoteSandbox, Sandbox
from envreg.runtime.snapshots import Snapshot, SnapshotStore

Isolation = Literal["local", "instance", "container"]
TIERS = ("local", "instance", "container")
ENDED_KEPT = 4096


@cache
def environment_digest(env: Environment) -> str:
    """The manifest digest that names an environment's exact code, schema and seed."""
    from envreg.manifest import build_manifest

    return build_manifest(env).digest


class Runtime:
    """Entry point for trainers: one API over the local, instance and container tiers.

    ```python
    async with Runtime(pool={"container": 4}) as rt:
        sb = await rt.sandbox("calendar", isolation="container")
        await sb.call_tool("list_calendars")
        print(sb.mcp_url, sb.token)          # for an external MCP agent, through the gateway
        forks = await rt.fork(await sb.snapshot(), 8, isolation="instance")
    ```

    `pool` gives warm-pool sizes per tier (or per ``"<tier>:<image id>"``); a pool is refilled in the
    background from its first acquire on, and `warm()` fills one at once. The Docker tiers need the
    runtime entered as a context manager: leaving it removes every container and network it made.
    The gateway answers ``127.0.0.1``/``localhost``/``[::1]`` at its port and `allowed_hosts`
    (``name:port`` or ``name:*``); browser pages at `cors_origins` may call it (none by default).
    """

    def __init__(
        self,
        *,
        snapshots: SnapshotStore | None = None,
        pool: dict[str, int] | None = None,
        lease_ttl: float = 3600.0,
        reap_interval: float = 1.0,
        gateway: bool = True,
        gateway_host: str = "127.0.0.1",
        gateway_port: int = 0,
        instances_per_container: int = 256,
        limits: Any = None,
        allowed_hosts: Sequence[str] = (),
        cors_origins: Sequence[str] = (),
    ) -> None:
        self.id = "rt_" + secrets.token_hex(6)
        self.snapshots = snapshots or SnapshotStore()
        self.sandboxes: dict[str, Sandbox] = {}
        self.pool_sizes = dict(pool or {})
        self.lease_ttl = lease_ttl
        self.reap_interval = reap_interval
        self.gateway_enabled = gateway
        self.gateway_host = gateway_host
        self.gateway_port = gateway_port
        self.gateway_url: str | None = None
        self.allowed_hosts = tuple(allowed_hosts)
        self.cors_origins = tuple(cors_origins)
        self.instances_per_container = instances_per_container
        self.limits = limits
        self._environments: dict[str, Environment] = {}
        self._pinned: dict[str, str] = {}
        self._stack: AsyncExitStack | None = None
        self._task_group: anyio.abc.TaskGroup | None = None
        self._docker: Any = None
        self._pools: Any = None
        self._http: httpx2.AsyncClient | None = None
        self._docker_lock = anyio.Lock()
        self._events: Any = None
        self._gateway: Any = None
        self._ended: OrderedDict[str, str] = OrderedDict()  # why recent sandboxes ended, for their URLs

    async def __aenter__(self) -> Runtime:
        self._stack = AsyncExitStack()
        self._task_group = await self._stack.enter_async_context(anyio.create_task_group())
        self._task_group.start_soon(self._reap_forever)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # sandboxes --------------------------------------------------------------------------------
    async def sandbox(
        self,
        env: str | Environment,
        *,
        isolation: Isolation = "local",
        state: dict[str, Any] | Snapshot | None = None,
        ttl: float | None = None,
    ) -> Sandbox:
        """Lease a sandbox of `env`, optionally starting from `state` (a state or a snapshot).

        `env` is an `Environment`, a folder or a name under ./images (local tier), or an image
        reference for the Docker tiers: a name (its newest image), ``name:version`` or a digest.
        """
        if isolation not in TIERS:
            raise ValueError(f"isolation must be one of {', '.join(TIERS)}, not {isolation!r}")
        if isolation == "local":
            sandbox = await self._local_sandbox(env)
        else:
            sandbox = await self._remote_sandbox(env, isolation)
        self.sandboxes[sandbox.id] = sandbox
        sandbox.expires_at = time.time() + (ttl or self.lease_ttl)
        try:
            if isinstance(state, Snapshot):
                await sandbox.restore(state)
            elif state is not None:
                await sandbox.load_state(state)
        except BaseException:
            await sandbox.close("its initial state was refused")
            raise
        return sandbox

    async def _local_sandbox(self, env: str | Environment) -> Sandbox:
        environment = env if isinstance(env, Environment) else load_environment(env)
        digest = environment_digest(environment)
        self._environments[digest] = environment
        return LocalSandbox(self, environment.instance(), digest)

    async def _remote_sandbox(self, env: str | Environment, isolation: str) -> Sandbox:
        pools = await self._ensure_docker()
        image = await self.resolve_image(env.name if isinstance(env, Environment) else env)
        token = secrets.token_urlsafe(24)
        if isolation == "container":
            container = await pools.acquire_container(image)
            sandbox = RemoteSandbox(self, isolation, container, pools.client(container), "default", token)
        else:
            host, instance_id = await pools.acquire_instance(image)
            sandbox = RemoteSandbox(self, isolation, host, pools.client(host), instance_id, token)
        if self.gateway_url:
            sandbox.mcp_url = f"{self.gateway_url}/sandboxes/{sandbox.id}/mcp"
        return sandbox

    async def fork(
        self,
        snapshot: Snapshot | str,
        n: int,
        *,
        isolation: Isolation = "local",
        env: str | None = None,
        ttl: float | None = None,
    ) -> list[Sandbox]:
        """`n` new sandboxes that all start from `snapshot`: all of them, or none (and the error)."""
        snap = self.snapshots.get(snapshot) if isinstance(snapshot, str) else snapshot
        target: str | Environment = env or self._environments.get(snap.env_digest) or snap.env
        if isolation == "local" and isinstance(target, str):
            target = load_environment(target)
        forks: list[Sandbox] = []

        async def one() -> None:
            forks.append(await self.sandbox(target, isolation=isolation, state=snap, ttl=ttl))

        try:
            async with anyio.create_task_group() as tg:
                for _ in range(n):
                    tg.start_soon(one)
        except BaseExceptionGroup as group:
            with anyio.CancelScope(shield=True):
                for sandbox in forks:
                    await sandbox.close("its fork group failed")
            first: BaseException = group
            while isinstance(first, BaseExceptionGroup):
                first = first.exceptions[0]
            raise first from None
        return forks

    async def warm(self, env: str, isolation: Isolation, n: int) -> None:
        """Fill the warm pool of `env` on a Docker tier to `n` now (and keep it there)."""
        pools = await self._ensure_docker()
        image = await self.resolve_image(env)
        self.pool_sizes[f"{isolation}:{image}"] = n
        await pools.prewarm(image, isolation, n)

    def get(self, sandbox_id: str) -> Sandbox | None:
        return self.sandboxes.get(sandbox_id)

    def ended_reason(self, sandbox_id: str) -> str | None:
        """Why a sandbox of this runtime ended ("its lease expired", ...), for the last few thousand."""
        return self._ended.get(sandbox_id)

    def _forget(self, sandbox: Sandbox) -> None:
        self.sandboxes.pop(sandbox.id, None)
        self._ended[sandbox.id] = sandbox.ended or "closed"
        if len(self._ended) > ENDED_KEPT:
            self._ended.popitem(last=False)

    # docker tiers ------------------------------------------------------------------------------
    async def resolve_image(self, ref: str) -> str:
        """The image ID for an environment reference (name, name:version, name@sha256:..., image ref).

        A runtime pins each reference at its first use, so every rollout of a run gets the same
        image (and its warm pool) even if the name is rebuilt meanwhile; a new runtime sees the rebuild.
        """
        if ref not in self._pinned:
            from envreg.runtime.images import resolve_image

            self._pinned[ref] = await anyio.to_thread.run_sync(resolve_image, self._docker.client, ref)
        return self._pinned[ref]

    async def _ensure_docker(self) -> Any:
        if self._task_group is None:
            raise RuntimeError(
                "the Docker tiers need the runtime as a context manager: `async with Runtime() as rt`"
            )
        async with self._docker_lock:
            if self._pools is None:
                from envreg.runtime.docker_backend import DockerBackend, Limits
                from envreg.runtime.pools import Pools

                self._docker = await anyio.to_thread.run_sync(
                    lambda: DockerBackend(self.id, self.limits or Limits())
                )
                self._http = httpx2.AsyncClient(
                    timeout=httpx2.Timeout(30.0, connect=2.0), limits=httpx2.Limits(max_connections=1000)
                )
                self._pools = Pools(self._docker, self._http, self._pool_size, self.instances_per_container)
                self._pools.bind(self._task_group)
                self._task_group.start_soon(self._watch_deaths)
                if self.gateway_enabled:
                    await self._task_group.start(self._serve_gateway)
        return self._pools

    def _pool_size(self, image: str, isolation: str) -> int:
        return self.pool_sizes.get(f"{isolation}:{image}", self.pool_sizes.get(isolation, 0))

    async def _container_status(self, container: Any) -> str:
        return await anyio.to_thread.run_sync(self._docker.status, container)

    async def _release_remote(self, sandbox: RemoteSandbox) -> None:
        if sandbox.isolation == "container":
            await anyio.to_thread.run_sync(self._docker.remove, sandbox.container)
        else:
            await self._pools.release_instance(sandbox.container, sandbox.instance_id)

    async def _watch_deaths(self) -> None:
        """End the sandboxes of any container that dies, as soon as the engine says so."""
        events = await anyio.to_thread.run_sync(self._docker.events)
        self._events = events
        token = anyio.lowlevel.current_token()

        def pump() -> None:
            try:
                for event in events:
                    anyio.from_thread.run_sync(self._on_death, event.get("id", ""), token=token)
            except Exception:  # the stream is closed at shutdown
                pass

        threading.Thread(target=pump, name="envreg-docker-events", daemon=True).start()

    def _on_death(self, container_id: str) -> None:
        for sandbox in list(self.sandboxes.values()):
            if (
                isinstance(sandbox, RemoteSandbox)
                and sandbox.container.id == container_id
                and not sandbox.ended
            ):
                sandbox.ended = "its container died"
                self._task_group.start_soon(sandbox.close, sandbox.ended)

    async def _serve_gateway(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        import uvicorn

        from envreg.runtime.access import AccessGuard
        from envreg.runtime.gateway import Gateway, QuietServer

        gateway = self._gateway = Gateway(self.get, self._http, ended=self.ended_reason)
        config = uvicorn.Config(
            AccessGuard(gateway, self.allowed_hosts, self.cors_origins),
            host=self.gateway_host,
            port=self.gateway_port,
            lifespan="off",
            log_level="warning",
            access_log=False,
        )
        server = QuietServer(config)
        self._gateway_server = server
        async with anyio.create_task_group() as tg:
            tg.start_soon(server.serve)
            while not server.started:
                await anyio.sleep(0.005)
            port = server.servers[0].sockets[0].getsockname()[1]
            self.gateway_url = f"http://{self.gateway_host}:{port}"
            task_status.started()

    # leases ------------------------------------------------------------------------------------
    async def _reap_forever(self) -> None:
        while True:
            await anyio.sleep(self.reap_interval)
            await self.reap()

    async def reap(self) -> list[str]:
        """Close every sandbox whose lease has expired; returns their ids."""
        now = time.time()
        expired = [s for s in self.sandboxes.values() if s.expires_at is not None and s.expires_at < now]
        for sandbox in expired:
            await sandbox.close("its lease expired")
        return [s.id for s in expired]

    # shutdown ----------------------------------------------------------------------------------
    async def close(self) -> None:
        """Release every sandbox, container and network this runtime holds."""
        with anyio.CancelScope(shield=True):
            if self._gateway is not None:
                self._gateway.end_streams()
            async with anyio.create_task_group() as tg:
                for sandbox in list(self.sandboxes.values()):
                    tg.start_soon(sandbox.close)
            if self._docker is not None:
                self._pools.drain()
                if self._events is not None:
                    self._events.close()
                await anyio.to_thread.run_sync(self._docker.close)
                self._docker = self._pools = None
            if self._http is not None:
                await self._http.aclose()
            if self._gateway is not None:
                await self._gateway.upstream.aclose()
            if getattr(self, "_gateway_server", None) is not None:
                self._gateway_server.should_exit = True
        if self._task_group is not None:
            self._task_group.cancel_scope.cancel()
        if self._stack is not None:
            stack, self._stack = self._stack, None
            await stack.aclose()
        self._task_group = None


__all__ = ["Isolation", "Runtime", "environment_digest"]
