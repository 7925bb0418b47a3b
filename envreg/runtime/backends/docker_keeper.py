"""Who owns what on a shared Docker engine: keepers, and garbage collection of what nobody owns any more.

Every runtime that uses the engine starts one *keeper*: a tiny container (no network, read-only,
nothing but `python3` reading its stdin) whose stdin the runtime holds open through an attach
connection, with ``StdinOnce``. When the runtime ends in any way (closed, SIGKILLed, its host gone),
the engine closes that stdin, the keeper exits, and its exit time is the runtime's last sign of life.
This works wherever the runtime runs (another container, another host on a TCP engine): liveness is
read from the engine, never from this host's process table.

`collect_garbage` removes the containers and networks of runtimes whose keeper has been gone for a
grace period (default 30 s), and anything past its hard expiry.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from envreg.protocol import DEFAULT_GRACE, EXPIRES_LABEL, KEEPER_LABEL, MANAGED_LABEL, RUNTIME_LABEL

logger = logging.getLogger("envreg.runtime")
KEEPER_COMMAND = ["python3", "-c", "import sys; sys.stdin.buffer.read()"]


class Keeper:
    """The keeper container of one runtime and the attach connection that keeps it alive."""

    def __init__(self, client: Any, runtime_id: str, image: str, labels: dict[str, str]) -> None:
        self.container = client.containers.create(
            image,
            entrypoint=KEEPER_COMMAND,
            command=[],
            name=f"envreg-keeper-{runtime_id.removeprefix('rt_')}",
            labels={**labels, KEEPER_LABEL: runtime_id},
            stdin_open=True,
            detach=False,  # with stdin_open: StdinOnce, the engine closes stdin when our attach ends
            network_mode="none",
            user="65534:65534",
            read_only=True,
            cap_drop=["ALL"],
            security_opt=["no-new-privileges:true"],
            pids_limit=8,
            mem_limit="32m",
        )
        # attach before start: with StdinOnce the engine closes stdin when this connection closes
        self.socket = client.api.attach_socket(self.container.id, params={"stdin": 1, "stream": 1})
        self.container.start()

    def close(self) -> None:
        raw = getattr(self.socket, "_sock", self.socket)  # the SDK hands out a SocketIO over the real socket
        with contextlib.suppress(OSError):
            raw.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            raw.close()
        with contextlib.suppress(Exception):
            self.container.remove(force=True)


def _epoch(text: str) -> float:
    """Docker's RFC 3339 timestamps (nanoseconds, ``Z``) as epoch seconds; 0 for the zero time."""
    if not text or text.startswith("0001-"):
        return 0.0
    head, _, frac = text.rstrip("Z").partition(".")
    return datetime.fromisoformat(head + "+00:00").timestamp() + float(f"0.{frac or 0}")


@dataclass
class Liveness:
    """Which runtimes sharing the engine are alive, from their keepers."""

    alive: set[str]
    gone_since: dict[str, float]

    @classmethod
    def read(cls, client: Any) -> Liveness:
        alive: set[str] = set()
        gone_since: dict[str, float] = {}
        for keeper in client.containers.list(all=True, filters={"label": KEEPER_LABEL}):
            runtime = keeper.labels.get(KEEPER_LABEL, "")
            if keeper.status == "running":
                alive.add(runtime)
            else:
                finished = _epoch(keeper.attrs.get("State", {}).get("FinishedAt", ""))
                gone_since[runtime] = max(gone_since.get(runtime, 0.0), finished)
        return cls(alive, gone_since)

    def owned(self, runtime: str, created: float, now: float, grace: float) -> bool:
        """Whether a resource of `runtime` (created at `created`) still has an owner, or may have one soon."""
        if runtime in self.alive:
            return True
        last_sign = self.gone_since.get(runtime, created)  # no keeper at all: its creation is the last sign
        return now - last_sign < grace


def collect_garbage(
    client: Any, *, everything: bool = False, grace: float = DEFAULT_GRACE, dry_run: bool = False
) -> tuple[list[str], list[str]]:
    """Remove the envreg containers and networks nobody owns: their runtime's keeper has been gone for
    `grace` seconds, or their hard expiry passed. `everything` removes all of them, live runtimes'
    included. Returns the names removed (containers, networks); with `dry_run`, the names it would remove,
    removing nothing."""
    import docker.errors

    now = time.time()
    liveness = Liveness.read(client)
    removed_containers: list[str] = []
    removed_networks: list[str] = []
    for container in client.containers.list(all=True, filters={"label": f"{MANAGED_LABEL}=true"}):
        labels = container.labels
        runtime = labels.get(RUNTIME_LABEL, "")
        created = _epoch(container.attrs.get("Created", ""))
        expired = float(labels.get(EXPIRES_LABEL, "0") or 0) < now and EXPIRES_LABEL in labels
        if everything or expired or not liveness.owned(runtime, created, now, grace):
            if dry_run:
                removed_containers.append(container.name)
                continue
            with contextlib.suppress(docker.errors.NotFound):
                container.remove(force=True)
                removed_containers.append(container.name)
    for network in client.networks.list(filters={"label": f"{MANAGED_LABEL}=true"}):
        labels = network.attrs.get("Labels") or {}
        runtime = labels.get(RUNTIME_LABEL, "")
        created = _epoch(network.attrs.get("Created", ""))
        if everything or not liveness.owned(runtime, created, now, grace):
            if dry_run:
                removed_networks.append(network.name)
                continue
            from envreg.runtime.backends.docker_network import remove_network

            try:
                remove_network(network)
                removed_networks.append(network.name)
            except docker.errors.APIError as exc:
                if "active endpoints" not in str(exc):
                    raise
    return removed_containers, removed_networks
