"""`Runtime`: leases sandboxes on an isolation tier, forks them from snapshots, and never leaks one."""

from __future__ import annotations

import secrets
import time
from collections import OrderedDict
from collections.abc import Sequence
from contextlib import AsyncExitStack
from typing import Any

import anyio
import httpx2

from envreg.env import Environment
from envreg.errors import BadRequest, EnvregError
from envreg.http.client import async_client
from envreg.protocol import KEEP_ALIVE_GRACE, KEEP_ALIVE_SECONDS, SHARED_TIERS, TIERS, Isolation
from envreg.runtime.backends import create_backend
from envreg.runtime.backends.base import Backend, EnvSpec
from envreg.runtime.backends.local import LocalBackend
from envreg.runtime.placement import Placement
from envreg.runtime.sandbox import Sandbox, upload_once
from envreg.runtime.snapshots import Snapshot, SnapshotStore

ENDED_KEPT = 4096


class Runtime:
    """Entry point for trainers: one API over the local, instance and container tiers.

    ```python
    async with Runtime(pool={"container": 4}) as rt:
        sb = await rt.sandbox("calendar", isolation="container")
        await sb.call_tool("list_calendars")
        print(sb.mcp_url, sb.token)          # for an external MCP agent, through the gateway
        forks = await rt.fork(await sb.snapshot(), 8, isolation="instance")
    ```

    `backend` runs the isolated tiers (``"docker"``, the default, ``"ray"``, or a `Backend`); the local
    tier always runs in this process. Other keyword arguments are the backend's options, e.g.
    ``Runtime(backend="ray", address="auto")``. `pool` gives warm-pool sizes per tier (or per
    ``"<tier>:<image id>"``); a pool is refilled in the background from its first acquire on, and `warm()` fills one at once. The
    isolated tiers need the runtime entered as a context manager: leaving it removes every container
    and network it made.
    `recycle=N` (Docker) keeps up to N containers per environment whose sandboxes ended for the next
    container sandboxes instead of removing them: each gets a fresh server process, forked from one that
    never served, and an empty /tmp (`envreg.server.recycle`); a container is used by one sandbox at a
    time, always. It saves the engine's start and removal of a container per sandbox.
    The gateway answers ``127.0.0.1``/``localhost``/``[::1]`` at its port and `allowed_hosts`
    (``name:port`` or ``name:*``); browser pages at `cors_origins` may call it (none by default). It
    relays plain tool calls on its fast lane (`envreg.runtime.fastlane`); `gateway_lane=False` sends
    everything through the ASGI gateway. Its answers say how long an idle connection is kept
    (``Keep-Alive: timeout=<gateway_keep_alive>``); it is closed `KEEP_ALIVE_GRACE` seconds later.
    """

    def __init__(
        self,
        *,
        backend: str | Backend = "docker",
        snapshots: SnapshotStore | None = None,
        pool: dict[str, int] | None = None,
        lease_ttl: float = 3600.0,
        reap_interval: float = 1.0,
        gateway: bool = True,
        gateway_host: str = "127.0.0.1",
        gateway_port: int = 0,
        gateway_lane: bool = True,
        gateway_keep_alive: int = KEEP_ALIVE_SECONDS,
        instances_per_container: int = 256,
        recycle: int = 0,
        limits: Any = None,
        allowed_hosts: Sequence[str] = (),
        cors_origins: Sequence[str] = (),
        **backend_options: Any,
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
        self.gateway_lane = gateway_lane
        self.gateway_keep_alive = gateway_keep_alive
        self._lane: Any = None
        self.instances_per_container = instances_per_container
        self.recycle = recycle
        self._backend_choice = backend
        self._backend_options = {
            **({"limits": limits} if limits is not None else {}),
            **({"recyclable": True} if recycle and backend == "docker" else {}),
            **backend_options,
        }
        self._local = Placement(LocalBackend(), lambda key, dedicated: 0, instances_per_server=1 << 30)
        self._isolated: Placement | None = None
        self._resolved: dict[tuple[str, Any], EnvSpec] = {}
        self._environments: dict[str, Environment] = {}
        self._stack: AsyncExitStack | None = None
        self._task_group: anyio.abc.TaskGroup | None = None
        self._http: httpx2.AsyncClient | None = None
        self._setup_lock = anyio.Lock()
        self._gateway: Any = None
        self._ended: OrderedDict[str, str] = OrderedDict()  # why recent sandboxes ended, for their URLs
        self._gateway_server: Any = None

    async def __aenter__(self) -> Runtime:
        self._stack = AsyncExitStack()
        self._task_group = await self._stack.enter_async_context(anyio.create_task_group())
        self._task_group.start_soon(self._reap_forever)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def backend(self) -> Backend | None:
        """The backend of the isolated tiers, once started."""
        return self._isolated.backend if self._isolated else None

    # sandboxes --------------------------------------------------------------------------------
    async def sandbox(
        self,
        env: str | Environment,
        *,
        isolation: Isolation = "local",
        state: dict[str, Any] | Snapshot | None = None,
        ttl: float | None = None,
        augment: Any = None,
    ) -> Sandbox:
        """Lease a sandbox of `env`, optionally starting from `state` (a state or a snapshot).

        `augment` (an `envreg.env.augment.Augmentation` or its dict) reshapes its tool results
        without changing what the tools do: see `Sandbox.augment`.

        `env` is an `Environment`, a folder or a name under ./images (local tier), or an image
        reference for the isolated tiers: a name (its newest image), ``name:version`` or a digest.
        """
        if isolation not in TIERS:
            raise BadRequest(f"isolation must be one of {', '.join(TIERS)}, not {str(isolation)[:40]!r}")
        placement = await self._placement(isolation)
        spec = await self.resolve(env, isolation)
        server, instance_id = await placement.acquire(spec, dedicated=isolation not in SHARED_TIERS)
        sandbox = Sandbox(
            server,
            instance_id,
            isolation,
            snapshots=self.snapshots,
            release=self._release,
            server_status=placement.backend.status,
            server_noun=getattr(placement.backend, "server_noun", "server"),
        )
        if self.gateway_url and sandbox.upstream is not None:
            from envreg.protocol import gateway_path

            sandbox.mcp_url = self.gateway_url + gateway_path(sandbox.id)
        self.sandboxes[sandbox.id] = sandbox
        sandbox.expires_at = time.time() + (ttl or self.lease_ttl)
        try:
            if isinstance(state, Snapshot):
                await sandbox.restore(state)
            elif state is not None:
                await sandbox.load_state(state)
            if augment is not None:
                await sandbox.augment(augment)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await sandbox.close("its initial state was refused")
            raise
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

    async def warm(self, env: str, isolation: Isolation, n: int, snapshot: Snapshot | None = None) -> None:
        """Fill the warm pool of `env` on an isolated tier to `n` now (and keep it there).

        With `snapshot`, every server in the pool gets it now, so that a later `fork(snapshot, ...)` (or
        restore) from the pool names it by hash instead of sending it: on the container tier, where
        each sandbox is a server of its own, that is the difference between one upload per fork and none.
        """
        placement = await self._placement(isolation)
        spec = await self.resolve(env, isolation)
        self.pool_sizes[f"{isolation}:{spec.key}"] = n
        dedicated = isolation not in SHARED_TIERS
        await placement.prewarm(spec, dedicated, n)
        if snapshot is not None:
            snapshot.check_compatible(spec.name, spec.digest)
            servers = {id(server): server for server, _ in placement.warm[spec.key, dedicated]}
            async with anyio.create_task_group() as tg:
                for server in servers.values():
                    tg.start_soon(upload_once, server, snapshot)

    def get(self, sandbox_id: str) -> Sandbox | None:
        return self.sandboxes.get(sandbox_id)

    def ended_reason(self, sandbox_id: str) -> str | None:
        """Why a sandbox of this runtime ended ("its lease expired", ...), for the last few thousand."""
        return self._ended.get(sandbox_id)

    async def resolve(self, env: str | Environment, isolation: Isolation = "container") -> EnvSpec:
        """What `env` names on `isolation`'s backend (an image ID, or the local environment's digest).

        A runtime pins each reference at its first use, so every rollout of a run gets the same image
        (and its warm pool) even if the name is rebuilt meanwhile; a new runtime sees the rebuild.
        """
        placement = await self._placement(isolation)
        key = (placement.backend.name, env)
        if key not in self._resolved:
            spec = await placement.backend.resolve(env)
            if isinstance(spec.payload, Environment):
                self._environments[spec.digest] = spec.payload
            self._resolved[key] = spec
        return self._resolved[key]

    async def _release(self, sandbox: Sandbox) -> None:
        self.sandboxes.pop(sandbox.id, None)
        self._ended[sandbox.id] = sandbox.ended or "closed"
        if len(self._ended) > ENDED_KEPT:
            self._ended.popitem(last=False)
        placement = self._local if sandbox.isolation == "local" else self._isolated
        if placement is not None:
            await placement.release(sandbox.server, sandbox.instance_id)

    async def logs(self, sandbox: Sandbox, tail: int = 200) -> str:
        """The last `tail` lines its environment server printed (on the instance tier, the shared
        container's, for every sandbox it hosts)."""
        placement = await self._placement(sandbox.isolation)
        return await placement.backend.logs(sandbox.server, tail)

    # backends ---------------------------------------------------------------------------------
    async def _placement(self, isolation: str) -> Placement:
        if isolation == "local":
            return self._local
        if self._isolated is not None:
            return self._isolated
        if self._task_group is None:
            raise EnvregError(
                "the isolated tiers need the runtime as a context manager",
                "write `async with Runtime() as rt:` (or use `SyncRuntime`)",
            )
        async with self._setup_lock:
            if self._isolated is None:
                self._http = async_client(
                    timeout=httpx2.Timeout(30.0, connect=2.0),
                    limits=httpx2.Limits(max_connections=1000),
                )
                backend = (
                    self._backend_choice
                    if isinstance(self._backend_choice, Backend)
                    else create_backend(self._backend_choice, self.id, self._http, **self._backend_options)
                )
                backend.watch(self._on_death)
                placement = Placement(backend, self._pool_size, self.instances_per_container, self.recycle)
                placement.bind(self._task_group)
                if self.gateway_enabled:
                    await self._task_group.start(self._serve_gateway)
                self._isolated = placement
        return self._isolated

    def _pool_size(self, key: str, dedicated: bool) -> int:
        tier = "container" if dedicated else "instance"
        return self.pool_sizes.get(f"{tier}:{key}", self.pool_sizes.get(tier, 0))

    def _on_death(self, server_id: str, reason: str | None = None) -> None:
        """End the sandboxes of a server that died, as soon as the backend says so (and why, if it can)."""
        for sandbox in list(self.sandboxes.values()):
            if sandbox.server.id == server_id and sandbox.ended is None:
                noun = getattr(self.backend, "server_noun", "server")
                sandbox.ended = reason or f"its {noun} died"
                if self._task_group is not None:
                    self._task_group.start_soon(sandbox.close, sandbox.ended)
        if self._isolated is not None:
            for server in self._isolated.servers():
                if server.id == server_id:
                    self._isolated.forget(server)

    async def _serve_gateway(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        import uvicorn

        from envreg.http.access import AccessGuard
        from envreg.http.asgi import KeepAlive
        from envreg.http.fastpath import verified
        from envreg.http.serving import QuietServer
        from envreg.runtime.fastlane import Lane
        from envreg.runtime.gateway import Gateway

        assert self._http is not None
        gateway = self._gateway = Gateway(self.get, self._http, ended=self.ended_reason)
        keep_alive = self.gateway_keep_alive
        self._lane = None
        if self.gateway_lane and verified("gateway"):
            self._lane = Lane(self.get, gateway.max_body, gateway.timeout, keep_alive)
        config = uvicorn.Config(
            KeepAlive(AccessGuard(gateway, self.allowed_hosts, self.cors_origins), keep_alive),
            host=self.gateway_host,
            port=self.gateway_port,
            lifespan="off",
            log_level="warning",
            access_log=False,
            timeout_keep_alive=keep_alive + KEEP_ALIVE_GRACE,
            **({"http": self._lane.protocol()} if self._lane is not None else {}),
        )
        server = self._gateway_server = QuietServer(config)
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
        """Release every sandbox, server and network this runtime holds."""
        with anyio.CancelScope(shield=True):
            if self._gateway is not None:
                self._gateway.end_streams()
            async with anyio.create_task_group() as tg:
                for sandbox in list(self.sandboxes.values()):
                    tg.start_soon(sandbox.close)
            if self._gateway_server is not None:
                self._gateway_server.should_exit = True
        # background work next (pool refills may be starting containers, the gateway relaying): wait
        # for it to end, so that nothing starts after the backend has cleared up
        if self._task_group is not None:
            self._task_group.cancel_scope.cancel()
        if self._stack is not None:
            stack, self._stack = self._stack, None
            await stack.aclose()
        self._task_group = None
        with anyio.CancelScope(shield=True):
            if self._isolated is not None:
                await self._isolated.backend.close()
                self._isolated = None
            if self._http is not None:
                await self._http.aclose()
            if self._gateway is not None:
                await self._gateway.upstream.aclose()
            if self._lane is not None:
                self._lane.close()


__all__ = ["Runtime"]
