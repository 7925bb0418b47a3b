"""Who owns what on a shared Docker engine: keepers, and garbage collection of what nobody owns any more.

Every runtime that uses the engine starts one *keeper*: a tiny container (no network, read-only,
nothing but `python3` reading its stdin) whose stdin the runtime holds open through an attach
connection, with ``StdinOnce``. When the runtime ends in any way (closed, SIGKILLed, its host gone),
the engine closes that stdin, the keeper exits, and its exit time is the runtime's last sign of life.
This works wherever the runtime runs (another container, another host on a TCP engine): liveness is
read from the engine, never from this host's process table.

`collect_garbage` removes the containers and networks of runtimes whose keeper has been gone for a
grace period (default 30 s), anything past its hard expiry, and firewall rules left without their network;
it says what it keeps (and until when) and what it could not remove (and why).
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from envreg.errors import EngineError
from envreg.protocol import DEFAULT_GRACE, EXPIRES_LABEL, KEEPER_LABEL, MANAGED_LABEL, RUNTIME_LABEL

logger = logging.getLogger("envreg.runtime")
KEEPER_COMMAND = ["python3", "-c", "import sys; sys.stdin.buffer.read()"]
WAIT_POLL = 300  # seconds one wait call on the keeper is held open before it is made again


class Keeper:
    """The keeper container of one runtime and the attach connection that keeps it alive.

    A watcher thread waits on the keeper's exit: when it dies while the runtime lives (killed, OOM), it starts
    another under the same name, well within `envreg gc`'s grace."""

    def __init__(self, client: Any, runtime_id: str, image: str, labels: dict[str, str]) -> None:
        self.client, self.runtime_id, self.image, self.labels = client, runtime_id, image, labels
        self.name = f"envreg-keeper-{runtime_id.removeprefix('rt_')}"
        self.restarts = 0
        self._retired: list[str] = []  # dead predecessors, renamed, to remove once a new keeper runs
        self._closed = threading.Event()
        self._lock = threading.Lock()  # a restart and close never interleave
        self._start()
        threading.Thread(target=self._watch, name=f"envreg-keeper-{runtime_id}", daemon=True).start()

    def _start(self) -> None:
        """Create, attach to and start a keeper under `self.name`. A dead predecessor is renamed out of the way
        and removed only once the new keeper exists: `envreg gc` must always find a keeper of this runtime,
        since a runtime with none counts as gone since each resource's creation (`Liveness.owned_until`)."""
        import docker.errors

        with contextlib.suppress(docker.errors.NotFound):
            retired = f"{self.name}-retired-{self.client.api.inspect_container(self.name)['Id'][:12]}"
            self.client.api.rename(self.name, retired)
            self._retired.append(retired)
        self.container = self.client.containers.create(
            self.image,
            entrypoint=KEEPER_COMMAND,
            command=[],
            name=self.name,
            labels={**self.labels, KEEPER_LABEL: self.runtime_id},
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
        self.socket = self.client.api.attach_socket(self.container.id, params={"stdin": 1, "stream": 1})
        self.container.start()
        while self._retired:
            with contextlib.suppress(docker.errors.NotFound):
                self.client.api.remove_container(self._retired[-1], force=True)
            self._retired.pop()

    def _raw(self) -> socket.socket:
        return getattr(self.socket, "_sock", self.socket)  # the SDK hands out a SocketIO over the real socket

    def _watch(self) -> None:
        """Wait on the keeper's exit (the engine's wait call, held open): start another, unless closing."""
        while not self._closed.is_set():
            try:
                self.container.wait(timeout=WAIT_POLL)
            except Exception:  # the wait timed out (it still runs), or the engine is away: look again
                if self._closed.wait(0.5):
                    return
                with contextlib.suppress(Exception):
                    self.container.reload()
                    if self.container.status in ALIVE_STATES:
                        continue
            if self._closed.is_set():
                return
            logger.warning(
                "the keeper of runtime %s stopped while the runtime runs: starting another", self.runtime_id
            )
            with contextlib.suppress(OSError):
                self._raw().close()
            try:
                with self._lock:
                    if self._closed.is_set():
                        return
                    self._start()
                self.restarts += 1
            except Exception as exc:  # the engine is gone or refuses: try again shortly
                logger.warning("could not restart the keeper of runtime %s: %s", self.runtime_id, exc)
                self._closed.wait(1.0)

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            raw = self._raw()
            with contextlib.suppress(OSError):
                raw.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                raw.close()
            for container in [self.container.id, *self._retired]:
                with contextlib.suppress(Exception):
                    self.client.api.remove_container(container, force=True)


def _epoch(text: str) -> float:
    """Docker's RFC 3339 timestamps (nanoseconds, ``Z``) as epoch seconds; 0 for the zero time."""
    if not text or text.startswith("0001-"):
        return 0.0
    head, _, frac = text.rstrip("Z").partition(".")
    return datetime.fromisoformat(head + "+00:00").timestamp() + float(f"0.{frac or 0}")


ALIVE_STATES = ("running", "paused", "restarting")  # a paused keeper's runtime still holds its connection
STARTING = 60.0
"""Seconds a keeper created but not started yet counts as alive: its runtime is between the keeper's create and
start (`Keeper._start`), and nothing else of it exists yet; `--grace 0` must not take it for dead."""


@dataclass
class Liveness:
    """Which runtimes sharing the engine are alive, from their keepers."""

    alive: set[str]
    gone_since: dict[str, float]

    @classmethod
    def read(cls, client: Any, now: float | None = None) -> Liveness:
        now = time.time() if now is None else now
        alive: set[str] = set()
        gone_since: dict[str, float] = {}
        for keeper in client.containers.list(all=True, filters={"label": KEEPER_LABEL}, ignore_removed=True):
            runtime = keeper.labels.get(KEEPER_LABEL, "")
            created = _epoch(keeper.attrs.get("Created", ""))
            if keeper.status in ALIVE_STATES or (keeper.status == "created" and now - created < STARTING):
                alive.add(runtime)
                continue
            # exited or dead: since it finished; created and never started in `STARTING`: since its creation
            state = keeper.attrs.get("State", {})
            last = _epoch(state.get("FinishedAt", "")) or created
            gone_since[runtime] = max(gone_since.get(runtime, 0.0), last)
        return cls(alive, gone_since)

    def owned_until(self, runtime: str, created: float, grace: float) -> float:
        """Until when a resource of `runtime` (created at `created`) counts as owned: forever while its
        runtime lives, else `grace` seconds after the runtime's last sign of life (its keeper's end, or the
        resource's creation when it has no keeper)."""
        if runtime in self.alive:
            return float("inf")
        return self.gone_since.get(runtime, created) + grace


@dataclass(frozen=True)
class Kept:
    """What `collect_garbage` left to a runtime that ended less than the grace period ago."""

    runtime: str
    containers: int
    networks: int
    until: float  # epoch seconds: from then on, gc removes them


@dataclass
class Garbage:
    """What one `collect_garbage` pass removed (or, dry, would remove), kept, and could not remove."""

    containers: list[str] = field(default_factory=list)
    networks: list[str] = field(default_factory=list)
    folders: list[str] = field(default_factory=list)  # the agent-socket folders of ended runtimes (as root)
    rules: list[str] = field(default_factory=list)  # firewall rules whose network was already gone
    kept: list[Kept] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)  # one line each: what, and why not
    stuck: list[str] = field(default_factory=list)  # networks only an engine restart can remove, and why


def collect_garbage(
    client: Any, *, everything: bool = False, grace: float = DEFAULT_GRACE, dry_run: bool = False
) -> Garbage:
    """Remove the envreg containers and networks nobody owns: their runtime's keeper has been gone for
    `grace` seconds, or their hard expiry passed (`everything`: all of them, live runtimes' included), and
    the firewall rules of sandbox networks that no longer exist. With `dry_run`, list what it would
    remove, removing nothing."""
    import docker.errors

    from envreg.runtime.backends.docker_network import PhantomEndpoint, remove_network, remove_orphan_rules
    from envreg.runtime.backends.docker_sockets import collect, socket_root

    now = time.time()  # before any listing: what a runtime makes from here on is newer than `now`, and kept
    liveness = Liveness.read(client, now)
    garbage = Garbage()
    kept: dict[str, Kept] = {}

    def keep(runtime: str, until: float, containers: int = 0, networks: int = 0) -> None:
        """Count a resource left to an ended runtime's grace (a live runtime's is not listed)."""
        if until != float("inf"):
            k = kept.get(runtime, Kept(runtime, 0, 0, until))
            kept[runtime] = Kept(
                runtime, k.containers + containers, k.networks + networks, max(k.until, until)
            )

    held: dict[str, set[str]] = {}  # runtime -> the names of its containers (to force their endpoints out)
    for container in client.containers.list(
        all=True, filters={"label": f"{MANAGED_LABEL}=true"}, ignore_removed=True
    ):
        labels = container.labels
        runtime = labels.get(RUNTIME_LABEL, "")
        held.setdefault(runtime, set()).add(container.name)
        expired = EXPIRES_LABEL in labels and float(labels[EXPIRES_LABEL] or 0) < now
        until = liveness.owned_until(runtime, _epoch(container.attrs.get("Created", "")), grace)
        if not (everything or expired or until <= now):
            keep(runtime, until, containers=1)
            continue
        if not dry_run:
            try:
                container.remove(force=True)
            except docker.errors.NotFound:
                continue
            except docker.errors.APIError as exc:
                if exc.status_code != 409:  # 409: its removal is already under way
                    garbage.failed.append(f"container {container.name}: {exc.explanation or exc}")
                    continue
        garbage.containers.append(container.name)
    for network in client.networks.list(filters={"label": f"{MANAGED_LABEL}=true"}):
        labels = network.attrs.get("Labels") or {}
        runtime = labels.get(RUNTIME_LABEL, "")
        until = liveness.owned_until(runtime, _epoch(network.attrs.get("Created", "")), grace)
        if not (everything or until <= now):
            keep(runtime, until, networks=1)
            continue
        if not dry_run:
            try:
                remove_network(network, held.get(runtime, ()), timeout=15.0)
            except PhantomEndpoint as exc:
                garbage.stuck.append(f"{exc} ({exc.hint})")
                continue
            except EngineError as exc:
                garbage.failed.append(f"network {network.name} and its firewall rule: {exc}")
                continue
        garbage.networks.append(network.name)
    garbage.folders = collect(
        socket_root(),
        lambda runtime, created: not everything and liveness.owned_until(runtime, created, grace) > now,
        dry_run,
    )
    if not dry_run:
        alive = {n.name for n in client.networks.list(filters={"label": f"{MANAGED_LABEL}=true"})}
        garbage.rules = remove_orphan_rules(alive)
    garbage.kept = [kept[runtime] for runtime in sorted(kept)]
    return garbage
