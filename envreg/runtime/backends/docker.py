"""The Docker backend: environment servers in hardened containers on one engine.

Every container runs as uid 65534 with a read-only root filesystem, no capabilities, no new
privileges and pids / memory / CPU limits, on this runtime's internal network (no egress, no traffic
between containers, the host closed to it: `docker_network`), with no published port. Its agent
plane requires a per-container secret that only the runtime and its gateway know. Containers and
the network carry the runtime's labels, and its keeper (`docker_keeper`) tells `envreg gc` when the
runtime is gone.
"""

from __future__ import annotations

import contextlib
import logging
import re
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio
import httpx2

from envreg.docker_engine import docker_client, engine_errors
from envreg.errors import BadRequest, EngineError, SandboxGone, UpstreamError
from envreg.protocol import (
    AGENT_PORT,
    AGENT_SOCKET_DIR,
    CONTROL_PORT,
    ENV_AGENT_SOCKET,
    ENV_AGENT_TOKEN,
    ENV_RECYCLE,
    ENV_TOKEN,
    EXPIRES_LABEL,
    ISOLATION_LABEL,
    LEASE_LABEL,
    MANAGED_LABEL,
    MANIFEST_DIGEST_LABEL,
    NAME_LABEL,
    RUNTIME_LABEL,
)
from envreg.runtime.backends.base import Backend, EnvSpec, Server
from envreg.runtime.backends.docker_keeper import Keeper
from envreg.runtime.backends.docker_network import PhantomEndpoint, create_network, remove_network
from envreg.runtime.backends.docker_sockets import SOCKET_NAME, SocketFolders, seal, socket_root
from envreg.runtime.client import EnvClient
from envreg.runtime.images import environment_labels, resolve_image

READY_TIMEOUT = 120.0
READY_POLL = 0.02
STATUS_POLL = 0.25
"""Seconds between the engine's status reads while a server starts or recycles (to see it exit), its
health being polled every `READY_POLL`: a status read is an inspect call, which costs dockerd far more CPU
than a refused connection costs this process; read at every poll, a start of 0.5-1 s made 25-50 of them."""
logger = logging.getLogger("envreg.runtime")
LOCAL_ENGINE = "http+docker://localhost"
"""The Docker SDK's base URL for an engine on this machine's Unix socket: it can mount this machine's folders."""
CONCURRENT_STARTS = 8  # more only thrash the CPUs
CONCURRENT_REMOVALS = 4  # fifty at once is where Docker 20.10 leaks network endpoints
_NAME = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_REFERENCE = re.compile(
    rf"^(?:[A-Za-z0-9.-]+(?::[0-9]+)?/)?{_NAME}(?:/{_NAME})*(?::[A-Za-z0-9_][A-Za-z0-9_.-]{{0,127}})?"
    r"(?:@sha256:[0-9a-f]{64})?$|^(?:sha256:)?[0-9a-f]{12,64}$"
)


@dataclass(frozen=True)
class Limits:
    """Per-container resource limits (configurable per runtime)."""

    memory: str = "256m"
    cpus: float = 1.0
    pids: int = 128
    tmpfs: str = "size=16m,mode=1777"


def check_reference(ref: str) -> str:
    """Refuse what is not an image reference before it reaches the engine's API paths."""
    if not isinstance(ref, str) or not _REFERENCE.match(ref):
        raise BadRequest(
            f"{str(ref)[:80]!r} is not an environment reference",
            "use a name (calendar), name:version (calendar:1.0.0), name@sha256:<digest> or an image reference",
        )
    return ref


class DockerBackend(Backend):
    """Starts hardened environment containers; one network and one keeper per runtime."""

    name = "docker"
    server_noun = "container"

    def __init__(
        self,
        runtime_id: str,
        http: httpx2.AsyncClient,
        limits: Limits | None = None,
        max_lifetime: float = 24 * 3600,
        recyclable: bool = False,
    ) -> None:
        self.runtime_id = runtime_id
        self.recyclable = recyclable
        self.http = http
        self.limits = limits or Limits()
        self.max_lifetime = max_lifetime
        self.labels = {MANAGED_LABEL: "true", RUNTIME_LABEL: runtime_id}
        self.network_name = f"envreg-{runtime_id}"
        self.client: Any = None
        self.network: Any = None
        self.keeper: Keeper | None = None
        self.sockets: SocketFolders | None = None
        """Where containers' agent sockets are (`docker_sockets`); None: each is reached on its port."""
        self.started_names: set[str] = set()  # every container this runtime started, by name
        self._removals: dict[
            str, threading.Event
        ] = {}  # container id -> set once its removal (in flight) is done
        self._removals_lock = threading.Lock()
        self._removal_slots = threading.BoundedSemaphore(CONCURRENT_REMOVALS)
        self._setup_lock = anyio.Lock()
        self._starts = anyio.Semaphore(CONCURRENT_STARTS)
        self._events: Any = None
        self._on_death: Callable[[str, str], None] | None = None

    async def _ready(self) -> None:
        async with self._setup_lock:
            if self.client is None:
                self.client = await anyio.to_thread.run_sync(docker_client)
                root = socket_root() if await anyio.to_thread.run_sync(self._shares_folders) else None
                self.sockets = SocketFolders(root, self.runtime_id) if root is not None else None
                if self._on_death is not None:
                    self._pump_events(self._on_death)

    def _shares_folders(self) -> bool:
        """Whether the engine runs on this machine, seeing its folders (not Docker Desktop's VM)."""
        if self.client.api.base_url != LOCAL_ENGINE:
            return False
        return self.client.info().get("OperatingSystem") != "Docker Desktop"

    async def _ensure_keeper(self, image: str) -> None:
        """The keeper, then the network: the runtime counts as alive (`envreg gc`) before it owns anything."""
        async with self._setup_lock:
            if self.keeper is None:
                with engine_errors("starting the runtime's keeper"):
                    self.keeper = await anyio.to_thread.run_sync(
                        Keeper, self.client, self.runtime_id, image, self.labels
                    )
            if self.network is None:
                self.network = await anyio.to_thread.run_sync(
                    create_network, self.client, self.network_name, "er-" + self.runtime_id[-12:], self.labels
                )

    # resolve ----------------------------------------------------------------------------------
    async def resolve(self, ref: Any) -> EnvSpec:
        name = getattr(ref, "name", ref)  # an `Environment` runs as its image
        await self._ready()
        image_id = await anyio.to_thread.run_sync(self._resolve_image, check_reference(name))
        labels = await anyio.to_thread.run_sync(environment_labels, self.client, image_id)
        return EnvSpec(key=image_id, name=labels[NAME_LABEL], digest=labels[MANIFEST_DIGEST_LABEL])

    def _resolve_image(self, ref: str) -> str:
        return resolve_image(self.client, ref)

    # servers ----------------------------------------------------------------------------------
    async def start(self, spec: EnvSpec, *, dedicated: bool) -> Server:
        await self._ready()
        await self._ensure_keeper(spec.key)
        async with self._starts:
            server = await anyio.to_thread.run_sync(self._run, spec, dedicated)
            try:
                await self._wait_ready(server)
                if self.sockets is not None:
                    folder = self.sockets.path(server.handle.labels[LEASE_LABEL])
                    server.agent_socket = await anyio.to_thread.run_sync(seal, folder)
            except BaseException:  # a cancelled start too: nobody will ever release this container
                with anyio.CancelScope(shield=True):
                    await self.stop(server)
                raise
        return server

    def _run(self, spec: EnvSpec, dedicated: bool) -> Server:
        token, agent_token = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
        lease = "ls_" + secrets.token_hex(8)
        labels = {
            **self.labels,
            LEASE_LABEL: lease,
            ISOLATION_LABEL: "container" if dedicated else "instance",
            EXPIRES_LABEL: str(int(time.time() + self.max_lifetime)),
        }
        name = f"envreg-{spec.name}-{lease[3:]}"
        self.started_names.add(name)
        environment = {ENV_TOKEN: token, ENV_AGENT_TOKEN: agent_token}
        if self.recyclable and dedicated:
            environment[ENV_RECYCLE] = "1"
        volumes = None
        if self.sockets is not None:  # the container's own folder, for its agent socket
            try:
                volumes = {str(self.sockets.make(lease)): {"bind": AGENT_SOCKET_DIR, "mode": "rw"}}
                environment[ENV_AGENT_SOCKET] = f"{AGENT_SOCKET_DIR}/{SOCKET_NAME}"
            except OSError as exc:
                logger.warning("%s: reaching %s on its port", exc, name)
        try:
            with engine_errors(f"starting {spec.name} ({spec.key[:19]})"):
                container = self.client.containers.run(
                    spec.key,
                    detach=True,
                    name=name,
                    environment=environment,
                    volumes=volumes,
                    labels=labels,
                    network=self.network_name,
                    user="65534:65534",
                    read_only=True,
                    tmpfs={"/tmp": self.limits.tmpfs},
                    cap_drop=["ALL"],
                    security_opt=["no-new-privileges:true"],
                    pids_limit=self.limits.pids,
                    mem_limit=self.limits.memory,
                    nano_cpus=int(self.limits.cpus * 1e9),
                )
                container.reload()
        except BaseException:
            if self.sockets is not None:
                self.sockets.remove(lease)
            raise
        ip = container.attrs["NetworkSettings"]["Networks"][self.network_name]["IPAddress"]
        client = EnvClient(
            self.http, f"http://{ip}:{AGENT_PORT}", f"http://{ip}:{CONTROL_PORT}", token, agent_token
        )
        return Server(
            id=container.id,
            spec=spec,
            client=client,
            dedicated=dedicated,
            agent_address=(ip, AGENT_PORT),
            agent_token=agent_token,
            handle=container,
        )

    async def _wait_ready(self, server: Server) -> None:
        deadline = time.monotonic() + READY_TIMEOUT
        status_read = _Pace(STATUS_POLL)
        while True:
            try:
                health = await server.client.healthz()  # pyright: ignore[reportAttributeAccessIssue]
                if self.recyclable and server.dedicated:  # started with ENV_RECYCLE: its sandbox pins it
                    server.generation = health.get("generation", 0)
                return
            except UpstreamError:
                late = time.monotonic() > deadline
                if status_read.due() or late:
                    status = await self.status(server)
                    if status != "running" or late:
                        logs = await anyio.to_thread.run_sync(self._logs, server)
                        await self.stop(server)
                        why = (
                            "exited while starting"
                            if status != "running"
                            else f"not ready in {READY_TIMEOUT:.0f}s"
                        )
                        raise EngineError(
                            f"{server.spec.name} ({server.spec.key[:19]}) {why} ({status}):\n{logs}"
                        ) from None
                await anyio.sleep(READY_POLL)

    async def logs(self, server: Server, tail: int) -> str:
        with engine_errors(f"reading the log of {server.spec.name} ({server.id[:12]})"):
            data = await anyio.to_thread.run_sync(lambda: server.handle.logs(tail=tail))
        return data.decode(errors="replace")

    def _logs(self, server: Server) -> str:
        try:
            return server.handle.logs(tail=20).decode(errors="replace")
        except Exception:
            return ""

    async def recycle(self, server: Server) -> bool:
        """A fresh server process in the same container (`envreg.server.recycle`), while the container
        has more than half its lifetime left; waits until the new process answers."""
        expires = float(server.handle.labels.get(EXPIRES_LABEL, 0))
        if not self.recyclable or expires - time.time() < self.max_lifetime / 2:
            return False
        try:
            ending = await server.client.recycle()  # pyright: ignore[reportAttributeAccessIssue]
        except (UpstreamError, SandboxGone):  # an image from before recycling answers 409
            return False
        deadline = time.monotonic() + READY_TIMEOUT
        status_read = _Pace(STATUS_POLL)
        while time.monotonic() < deadline:
            try:
                generation = (await server.client.healthz()).get("generation", 0)  # pyright: ignore[reportAttributeAccessIssue]
                if generation > ending:
                    server.generation = generation
                    return True
            except UpstreamError:
                if status_read.due() and await self.status(server) != "running":
                    return False
            await anyio.sleep(0.01)
        return False

    async def stop(self, server: Server) -> None:
        await anyio.to_thread.run_sync(self._remove, server.handle)

    def _remove(self, container: Any) -> None:
        """Remove a container, once: a second caller waits for the first removal instead of racing it (two
        removals of one container at once, or many of one network's, can leave Docker 20.10 an endpoint no
        container owns, which then keeps the network from being removed)."""
        import docker.errors

        with self._removals_lock:
            done = self._removals.get(container.id)
            first = done is None
            if done is None:
                done = self._removals[container.id] = threading.Event()
        if not first:
            done.wait(60)
            return
        try:
            with self._removal_slots:
                container.remove(force=True)
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as exc:
            if exc.status_code != 409:  # removal already in progress (by another client)
                raise EngineError(
                    f"removing container {container.short_id}: {exc.explanation or exc}"
                ) from None
        finally:
            if self.sockets is not None and LEASE_LABEL in container.labels:
                self.sockets.remove(container.labels[LEASE_LABEL])
            done.set()
            with self._removals_lock:
                self._removals.pop(container.id, None)

    async def status(self, server: Server) -> str:
        return await anyio.to_thread.run_sync(self._status, server.handle)

    @staticmethod
    def _status(container: Any) -> str:
        """`running`, `exited (exit code N)`, or `removed`."""
        import docker.errors

        try:
            container.reload()
        except docker.errors.NotFound:
            return "removed"
        state = container.attrs["State"]
        if state.get("Running"):
            return "running"
        oom = ", OOM-killed: it reached its memory limit" if state.get("OOMKilled") else ""
        return f"{state.get('Status', 'exited')} (exit code {state.get('ExitCode')}{oom})"

    def _status_by_id(self, container_id: str) -> str:
        import docker.errors

        try:
            return self._status(self.client.containers.get(container_id))
        except docker.errors.NotFound:
            return "removed"

    def watch(self, on_death: Callable[[str, str], None]) -> None:
        """Report this runtime's containers that die, from the engine's event stream."""
        self._on_death = on_death

    def _pump_events(self, on_death: Callable[[str, str], None]) -> None:
        events = self.client.events(
            decode=True,
            filters={"type": "container", "event": "die", "label": f"{RUNTIME_LABEL}={self.runtime_id}"},
        )
        self._events = events
        token = anyio.lowlevel.current_token()

        def pump() -> None:
            try:
                for event in events:
                    reason = f"its {self.server_noun} is {self._status_by_id(event.get('id', ''))}"
                    anyio.from_thread.run_sync(on_death, event.get("id", ""), reason, token=token)
            except Exception:  # the stream is closed at shutdown
                pass

        threading.Thread(target=pump, name="envreg-docker-events", daemon=True).start()

    async def close(self) -> None:
        """Remove every container, the keeper and the network this runtime created."""
        if self.client is None:
            return
        if self._events is not None:
            self._events.close()
        await anyio.to_thread.run_sync(self._close)

    def _close(self) -> None:

        if self.keeper is not None:
            self.keeper.close()
        client = self.client

        def sweep() -> None:
            """Remove what is left: a start still running in a worker thread can attach one after a listing."""
            for container in client.containers.list(
                all=True, filters={"label": f"{RUNTIME_LABEL}={self.runtime_id}"}, ignore_removed=True
            ):
                with contextlib.suppress(EngineError):
                    self._remove(container)

        try:
            if self.network is not None:
                remove_network(self.network, self.started_names, sweep=sweep)
            else:
                sweep()
        except PhantomEndpoint as exc:  # it holds nothing: say so, and leave it to the engine's restart
            logger.warning("%s (%s)", exc, exc.hint)
        if self.sockets is not None:
            self.sockets.close()
        self.client.close()
        self.client = None


class _Pace:
    """`due()` is true at most once per `seconds`, the first time at once."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._next = 0.0

    def due(self) -> bool:
        now = time.monotonic()
        if now < self._next:
            return False
        self._next = now + self.seconds
        return True
