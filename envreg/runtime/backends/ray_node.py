"""The agent of one Ray node: that node's Docker engine (through the Docker backend) and its proxy port.

The Ray backend starts one `NodeAgent` actor per node, pinned there. The actor runs a `DockerBackend`
for its own engine, so every container is started, hardened, networked, watched and kept exactly as on
one machine: its own internal network and firewall rule, its own keeper (whose exit, when the actor
dies with its node or its driver, lets `envreg gc` on that engine collect what was left), hard expiry
labels. It serves `NodeProxy` on the node's cluster address, and reports its containers' deaths to the
runtime through `events` (a long poll).

Every method answers ``{"ok": value}`` or ``{"error": ...}``: envreg errors cross the cluster as data
(`encode_error` / `decode_error`) with their class, message and hint intact.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import httpx2

from envreg.errors import EngineError, EnvregError
from envreg.http.client import async_client
from envreg.protocol import RUNTIME_LABEL
from envreg.runtime.backends.base import EnvSpec, Server
from envreg.runtime.backends.docker import DockerBackend, Limits
from envreg.runtime.backends.ray_proxy import NodeProxy

Reply = dict[str, Any]


def encode_error(exc: EnvregError) -> dict[str, Any]:
    """An envreg error as plain data (class, message and attributes such as the hint)."""
    cls = type(exc)
    return {"type": f"{cls.__module__}:{cls.__qualname__}", "message": exc.message, "attrs": dict(vars(exc))}


def decode_error(data: dict[str, Any], where: str) -> EnvregError:
    """The error `encode_error` described, its message prefixed with `where` (the node it came from)."""
    module, _, name = data["type"].partition(":")
    try:
        cls = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        cls = EngineError
    if not (isinstance(cls, type) and issubclass(cls, EnvregError)):
        cls = EngineError
    exc = cls.__new__(cls)
    exc.__dict__.update({"hint": None, **data.get("attrs", {})})
    exc.message = f"{where}: {data['message']}"
    Exception.__init__(exc, exc.message)
    return exc


def replies(method: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Reply]]:
    """Answer ``{"ok": result}``, or ``{"error": ...}`` for an envreg error."""

    @functools.wraps(method)
    async def wrapper(self: Any, *args: Any) -> Reply:
        try:
            return {"ok": await method(self, *args)}
        except EnvregError as exc:
            return {"error": encode_error(exc)}

    return wrapper


class NodeAgent:
    """One node's containers and proxy; created by `RayBackend` as a Ray actor pinned to its node."""

    def __init__(self, runtime_id: str, secret: str, limits: Limits | None, max_lifetime: float) -> None:
        self.runtime_id = runtime_id
        self.secret = secret
        self.limits = limits
        self.max_lifetime = max_lifetime
        self.servers: dict[str, Server] = {}
        self.http: httpx2.AsyncClient | None = None
        self.backend: DockerBackend | None = None
        self._deaths: list[str] = []
        self._death = asyncio.Event()
        self._server: Any = None
        self._serving: asyncio.Task[None] | None = None

    @replies
    async def setup(self) -> dict[str, Any]:
        """Start the proxy on the node's cluster address; returns where it listens."""
        import ray
        import uvicorn

        from envreg.http.serving import QuietServer

        self.http = async_client(
            timeout=httpx2.Timeout(30.0, connect=2.0),
            limits=httpx2.Limits(max_connections=1000),
        )
        self.backend = DockerBackend(self.runtime_id, self.http, self.limits, self.max_lifetime)
        self.backend.watch(self._died)
        host = ray.util.get_node_ip_address()
        proxy = NodeProxy(self.servers.get, self.secret, self.http)
        config = uvicorn.Config(
            proxy, host=host, port=0, lifespan="off", log_level="warning", access_log=False
        )
        self._server = QuietServer(config)
        self._serving = asyncio.ensure_future(self._server.serve())
        while not self._server.started:
            if self._serving.done():  # pyright: ignore[reportOptionalMemberAccess]
                raise EngineError(f"the node proxy did not start on {host}: {self._serving.exception()!r}")  # pyright: ignore[reportOptionalMemberAccess]
            await asyncio.sleep(0.01)
        port = self._server.servers[0].sockets[0].getsockname()[1]
        return {"host": host, "port": port, "node_id": ray.get_runtime_context().get_node_id()}

    async def ping(self) -> str:
        return "pong"

    @replies
    async def resolve(self, ref: str) -> tuple[str, str, str]:
        """An environment reference -> (image ID, name, manifest digest) on this node's engine."""
        spec = await self._backend().resolve(ref)
        return spec.key, spec.name, spec.digest

    @replies
    async def start_server(self, key: str, name: str, digest: str, dedicated: bool) -> str:
        """Start a hardened container and return its id once it answers."""
        server = await self._backend().start(EnvSpec(key=key, name=name, digest=digest), dedicated=dedicated)
        self.servers[server.id] = server
        return server.id

    @replies
    async def stop_server(self, server_id: str) -> None:
        server = self.servers.pop(server_id, None)
        if server is not None:
            await self._backend().stop(server)

    @replies
    async def status(self, server_id: str) -> str:
        server = self.servers.get(server_id)
        return "removed" if server is None else await self._backend().status(server)

    @replies
    async def events(self) -> list[tuple[str, str]]:
        """Wait until containers of this node die; returns (container id, status) for each."""
        while not self._deaths:
            self._death.clear()
            await self._death.wait()
        deaths, self._deaths = self._deaths, []
        reported = []
        for server_id in deaths:
            server = self.servers.get(server_id)
            if server is not None:
                reported.append((server_id, await self._backend().status(server)))
        return reported

    def _died(self, server_id: str, reason: str | None = None) -> None:
        if server_id in self.servers:
            self._deaths.append(server_id)
            self._death.set()

    @replies
    async def sweep(self, runtime_ids: list[str]) -> list[str]:
        """Remove what the given runtimes left on this engine, once their keepers have exited."""
        return await anyio.to_thread.run_sync(sweep_runtimes, runtime_ids)

    async def close(self) -> None:
        """Remove every container, the keeper and the network; stop the proxy."""
        if self._server is not None:
            self._server.should_exit = True
        with contextlib.suppress(Exception):
            if self.backend is not None:
                await self.backend.close()
        if self._serving is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._serving, 10)
        if self.http is not None:
            await self.http.aclose()
        self.servers.clear()

    def _backend(self) -> DockerBackend:
        if self.backend is None:
            raise EngineError("the node agent was not set up")
        return self.backend


def sweep_runtimes(runtime_ids: list[str]) -> list[str]:
    """On this machine's engine: remove the containers, networks and socket folders of `runtime_ids` whose
    keeper no longer runs (never a live runtime's). `envreg gc` does the same for every ended runtime, after a
    grace period."""
    import docker.errors

    from envreg.docker_engine import docker_client
    from envreg.runtime.backends.docker_keeper import Liveness
    from envreg.runtime.backends.docker_network import remove_network
    from envreg.runtime.backends.docker_sockets import collect, socket_root

    client = docker_client()
    removed: list[str] = []
    try:
        gone = set(runtime_ids) - Liveness.read(client).alive
        for runtime_id in sorted(gone):
            label = {"label": f"{RUNTIME_LABEL}={runtime_id}"}
            for container in client.containers.list(all=True, filters=label, ignore_removed=True):
                try:
                    container.remove(force=True)
                    removed.append(container.name)
                except docker.errors.NotFound:
                    pass
                except docker.errors.APIError as exc:
                    if exc.status_code != 409:  # 409: its removal is already under way
                        raise
            for network in client.networks.list(filters=label):
                with contextlib.suppress(docker.errors.NotFound):
                    remove_network(network)
                    removed.append(network.name)
        removed += collect(socket_root(), lambda runtime, _: runtime not in gone)
    finally:
        client.close()
    return removed
