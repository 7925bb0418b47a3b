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
    CONTROL_PORT,
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
from envreg.runtime.backends.docker_network import create_network, remove_network
from envreg.runtime.client import EnvClient
from envreg.runtime.images import environment_labels, resolve_image

READY_TIMEOUT = 120.0
CONCURRENT_STARTS = 8  # more only thrash the CPUs
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
        self.started_names: set[str] = set()  # every container this runtime started, by name
        self._setup_lock = anyio.Lock()
        self._starts = anyio.Semaphore(CONCURRENT_STARTS)
        self._events: Any = None
        self._on_death: Callable[[str], None] | None = None

    async def _ready(self) -> None:
        async with self._setup_lock:
            if self.client is None:
                self.client = await anyio.to_thread.run_sync(docker_client)
                self.network = await anyio.to_thread.run_sync(
                    create_network, self.client, self.network_name, "er-" + self.runtime_id[-12:], self.labels
                )
                if self._on_death is not None:
                    self._pump_events(self._on_death)

    async def _ensure_keeper(self, image: str) -> None:
        async with self._setup_lock:
            if self.keeper is None:
                with engine_errors("starting the runtime's keeper"):
                    self.keeper = await anyio.to_thread.run_sync(
                        Keeper, self.client, self.runtime_id, image, self.labels
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
        with engine_errors(f"starting {spec.name} ({spec.key[:19]})"):
            container = self.client.containers.run(
                spec.key,
                detach=True,
                name=name,
                environment={
                    ENV_TOKEN: token,
                    ENV_AGENT_TOKEN: agent_token,
                    **({ENV_RECYCLE: "1"} if self.recyclable and dedicated else {}),
                },
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
        while True:
            try:
                await server.client.healthz()  # pyright: ignore[reportAttributeAccessIssue]
                return
            except UpstreamError:
                status = await self.status(server)
                if status != "running" or time.monotonic() > deadline:
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
                await anyio.sleep(0.02)

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
        while time.monotonic() < deadline:
            try:
                if (await server.client.healthz()).get("generation", 0) > ending:  # pyright: ignore[reportAttributeAccessIssue]
                    return True
            except UpstreamError:
                if await self.status(server) != "running":
                    return False
            await anyio.sleep(0.01)
        return False

    async def stop(self, server: Server) -> None:
        await anyio.to_thread.run_sync(self._remove, server.handle)

    @staticmethod
    def _remove(container: Any) -> None:
        import docker.errors

        try:
            container.remove(force=True)
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as exc:
            if exc.status_code != 409:  # removal already in progress
                raise EngineError(
                    f"removing container {container.short_id}: {exc.explanation or exc}"
                ) from None

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
        oom = ", OOM-killed" if state.get("OOMKilled") else ""
        return f"{state.get('Status', 'exited')} (exit code {state.get('ExitCode')}{oom})"

    def watch(self, on_death: Callable[[str], None]) -> None:
        """Report this runtime's containers that die, from the engine's event stream."""
        self._on_death = on_death

    def _pump_events(self, on_death: Callable[[str], None]) -> None:
        events = self.client.events(
            decode=True,
            filters={"type": "container", "event": "die", "label": f"{RUNTIME_LABEL}={self.runtime_id}"},
        )
        self._events = events
        token = anyio.lowlevel.current_token()

        def pump() -> None:
            try:
                for event in events:
                    anyio.from_thread.run_sync(on_death, event.get("id", ""), token=token)
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
        import docker.errors

        if self.keeper is not None:
            self.keeper.close()
        # a start still running in a worker thread can attach a container after the listing: sweep again;
        # the engine can be slow to drop the endpoints of fifty containers removed at once (Docker 20.10)
        deadline = time.monotonic() + 60
        while True:
            for container in self.client.containers.list(
                all=True, filters={"label": f"{RUNTIME_LABEL}={self.runtime_id}"}
            ):
                with contextlib.suppress(docker.errors.NotFound):
                    container.remove(force=True)
            try:
                remove_network(self.network)
                break
            except docker.errors.NotFound:
                break
            except docker.errors.APIError as exc:  # "has active endpoints"
                left = self._force_endpoints_out(self.network)
                if time.monotonic() > deadline:
                    raise EngineError(
                        f"could not remove network {self.network.name}: endpoints still on it: "
                        f"{', '.join(left) or '(none listed)'} ({exc.explanation})",
                        "run `envreg gc`: it removes the network and its firewall rule",
                    ) from exc
                time.sleep(0.5)
        self.client.close()
        self.client = None

    def _force_endpoints_out(self, network: Any) -> list[str]:
        """Force out the endpoints still on `network`, those it lists and one per container this runtime
        started (a removal that raced with others can leave an endpoint behind that no container owns, and
        Docker 20.10 deletes it only when asked by its name, the container's); returns the names listed."""
        import docker.errors

        with contextlib.suppress(docker.errors.APIError):
            network.reload()
        listed = sorted(
            n for info in (network.attrs.get("Containers") or {}).values() if (n := info.get("Name"))
        )
        for name in sorted(set(listed) | self.started_names):
            with contextlib.suppress(docker.errors.APIError):
                network.disconnect(name, force=True)
        return listed
