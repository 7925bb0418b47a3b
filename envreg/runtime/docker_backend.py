"""Hardened environment containers on the Docker engine, labelled so that nothing outlives its runtime."""

from __future__ import annotations

import contextlib
import os
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

import docker
import docker.errors
from docker.models.containers import Container

from envreg.docker_engine import EngineUnavailable, require_engine
from envreg.runtime.errors import EngineError, ImageNotFound

LABEL = "io.envreg"
MANAGED = f"{LABEL}.managed"
RUNTIME = f"{LABEL}.runtime"
RUNTIME_PID = f"{LABEL}.runtime.pid"
RUNTIME_STARTED = f"{LABEL}.runtime.started"
LEASE = f"{LABEL}.lease"
EXPIRES = f"{LABEL}.expires"
TIER = f"{LABEL}.isolation"
AGENT_PORT = 8000
CONTROL_PORT = 8001


@dataclass(frozen=True)
class Limits:
    """Per-container resource limits (configurable per runtime)."""

    memory: str = "256m"
    cpus: float = 1.0
    pids: int = 128
    tmpfs: str = "size=16m,mode=1777"


@dataclass
class EnvContainer:
    """A running environment server container and how the host reaches it."""

    container: Container
    image: str
    ip: str
    token: str
    lease: str
    env_name: str
    env_digest: str
    instances: set[str] = field(default_factory=set)

    @property
    def id(self) -> str:
        return self.container.id

    @property
    def agent_url(self) -> str:
        return f"http://{self.ip}:{AGENT_PORT}"

    @property
    def control_url(self) -> str:
        return f"http://{self.ip}:{CONTROL_PORT}"


def process_start_time(pid: int) -> str:
    """The kernel's start time of `pid` (clock ticks since boot): with the pid, it names one process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except OSError:
        return ""


def runtime_alive(labels: dict[str, str]) -> bool:
    """Whether the runtime that labelled a resource still runs (same pid, same start time)."""
    pid = labels.get(RUNTIME_PID, "")
    return pid.isdigit() and process_start_time(int(pid)) == labels.get(RUNTIME_STARTED) != ""


class DockerBackend:
    """Creates and removes hardened containers on one internal, egress-free network per runtime."""

    def __init__(
        self, runtime_id: str, limits: Limits | None = None, max_lifetime: float = 24 * 3600
    ) -> None:
        try:
            require_engine()
        except EngineUnavailable as exc:
            raise EngineError(str(exc)) from None
        self.client = docker.from_env(timeout=60)
        self.runtime_id = runtime_id
        self.limits = limits or Limits()
        self.max_lifetime = max_lifetime
        pid = os.getpid()
        self.labels = {
            MANAGED: "true",
            RUNTIME: runtime_id,
            RUNTIME_PID: str(pid),
            RUNTIME_STARTED: process_start_time(pid),
        }
        self.network_name = f"envreg-{runtime_id}"
        self.network = self.client.networks.create(
            self.network_name,
            driver="bridge",
            internal=True,
            options={"com.docker.network.bridge.enable_icc": "false"},
            labels=self.labels,
        )

    def image_labels(self, image: str) -> dict[str, str]:
        try:
            return self.client.images.get(image).labels or {}
        except docker.errors.ImageNotFound:
            raise ImageNotFound(
                f"image {image!r} is not in the engine: run `envreg build` or `envreg pull`"
            ) from None

    def start(self, image: str, isolation: str) -> EnvContainer:
        """Start one hardened environment container and wait until its control plane answers."""
        labels = self.image_labels(image)
        token = secrets.token_urlsafe(24)
        lease = "ls_" + secrets.token_hex(8)
        container_labels = {
            **self.labels,
            LEASE: lease,
            TIER: isolation,
            EXPIRES: str(int(time.time() + self.max_lifetime)),
        }
        try:
            container = self.client.containers.run(
                image,
                detach=True,
                name=f"envreg-{labels.get('io.envreg.name', 'env')}-{lease[3:]}",
                environment={"ENVREG_TOKEN": token},
                labels=container_labels,
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
        except docker.errors.DockerException as exc:
            raise EngineError(f"could not start {image}: {exc}") from None
        return EnvContainer(
            container=container,
            image=image,
            ip=ip,
            token=token,
            lease=lease,
            env_name=labels.get("io.envreg.name", ""),
            env_digest=labels.get("io.envreg.manifest.digest", ""),
        )

    def remove(self, env_container: EnvContainer) -> None:
        try:
            env_container.container.remove(force=True)
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as exc:
            if exc.status_code != 409:  # removal already in progress
                raise

    def status(self, env_container: EnvContainer) -> str:
        """`running`, `exited (code N)`, or `removed`."""
        try:
            env_container.container.reload()
        except docker.errors.NotFound:
            return "removed"
        state = env_container.container.attrs["State"]
        if state.get("Running"):
            return "running"
        return f"{state.get('Status', 'exited')} (exit code {state.get('ExitCode')}{', OOM-killed' if state.get('OOMKilled') else ''})"

    def events(self) -> Any:
        """A blocking iterator over this runtime's container `die` events (close it to stop)."""
        return self.client.events(
            decode=True,
            filters={"type": "container", "event": "die", "label": f"{RUNTIME}={self.runtime_id}"},
        )

    def close(self) -> None:
        """Remove every container and the network this runtime created."""
        for container in self.client.containers.list(
            all=True, filters={"label": f"{RUNTIME}={self.runtime_id}"}
        ):
            with contextlib.suppress(docker.errors.NotFound):
                container.remove(force=True)
        with contextlib.suppress(docker.errors.NotFound):
            self.network.remove()
        self.client.close()


def collect_garbage(
    client: docker.DockerClient | None = None, everything: bool = False
) -> tuple[list[str], list[str]]:
    """Remove envreg containers and networks whose runtime is gone or whose hard expiry passed.

    With `everything`, remove all of them, live runtimes included. Returns the removed names.
    """
    client = client or docker.from_env()
    now = time.time()
    removed_containers, removed_networks = [], []
    for container in client.containers.list(all=True, filters={"label": f"{MANAGED}=true"}):
        labels = container.labels
        expired = float(labels.get(EXPIRES, "0") or 0) < now
        if everything or expired or not runtime_alive(labels):
            try:
                container.remove(force=True)
                removed_containers.append(container.name)
            except docker.errors.NotFound:
                pass
    for network in client.networks.list(filters={"label": f"{MANAGED}=true"}):
        if everything or not runtime_alive(network.attrs.get("Labels") or {}):
            try:
                network.remove()
                removed_networks.append(network.name)
            except docker.errors.NotFound:
                pass
            except docker.errors.APIError as exc:
                if "active endpoints" not in str(exc):
                    raise
    return removed_containers, removed_networks
