"""The `Backend` interface: where environment servers run. One implementation per module.

A backend starts *servers* (an environment server process: in this process, a container, a Ray actor),
tells when one dies, stops them, and finds what it owns for garbage collection. It knows nothing of
sandboxes, leases or tiers: the runtime places sandboxes on servers (a dedicated server per sandbox,
or instances on a shared one) and talks to each server through its `ServerClient`.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Protocol

from envreg.env import ToolResult
from envreg.env.augment import Augmentation
from envreg.protocol import GENERATION_HEADER
from envreg.runtime.snapshots import Snapshot


class ServerClient(Protocol):
    """What the runtime asks of one environment server (its agent plane and control plane).

    Failures raise envreg errors: `SandboxGone` (no such instance), `InvalidState` (state refused,
    nothing changed), `UnknownToolError`, `UpstreamError` (the server failed or did not answer).
    """

    async def list_tools(self, instance_id: str) -> list[dict[str, Any]]: ...
    async def call_tool(
        self, instance_id: str, name: str, arguments: dict[str, Any] | None
    ) -> ToolResult: ...
    async def get_state(self, instance_id: str) -> dict[str, Any]: ...
    async def state_sha256(self, instance_id: str) -> str: ...
    async def put_state(self, instance_id: str, state: dict[str, Any]) -> None: ...
    async def reset(self, instance_id: str) -> None: ...
    async def create_instance(self, state: dict[str, Any] | None = None) -> str: ...
    async def delete_instance(self, instance_id: str) -> None: ...
    async def augment(self, instance_id: str, config: Augmentation | None) -> None: ...
    async def augmentation_labels(self, instance_id: str) -> list[dict[str, Any]]: ...

    # snapshots: the server keeps committed states by hash; a state crosses to a server once
    async def snapshot(self, instance_id: str) -> str:
        """Keep the instance's state on its server; returns the sha256 of its canonical JSON."""
        ...

    async def snapshot_payload(self, sha256: str) -> bytes:
        """The canonical JSON of a snapshot the server keeps (`SnapshotNotFound` when it does not)."""
        ...

    async def restore(self, instance_id: str, sha256: str) -> bool:
        """Load a kept snapshot into the instance (no copy); False when the server does not have it."""
        ...

    async def upload_snapshot(self, snapshot: Snapshot) -> None:
        """Send a snapshot's state to the server (`InvalidState` when the environment refuses it)."""
        ...


@dataclass(frozen=True)
class EnvSpec:
    """A resolved environment reference: what a backend starts, and the key warm pools share."""

    key: str
    """Image ID (Docker, Ray) or manifest digest (local): equal keys start identical servers."""
    name: str
    digest: str
    """The manifest digest: snapshots restore only into the same digest."""
    payload: Any = None
    """Backend-specific: the `Environment` for the local backend, nothing for images."""


@dataclass(frozen=True)
class Upstream:
    """Where the gateway forwards a sandbox's MCP traffic, and the secret that server requires."""

    host: str
    port: int
    path: str
    token: str | None
    server_id: str
    generation: int | None = None
    """The server process the sandbox was leased (a recyclable server refuses its others' requests)."""
    socket: str | None = None
    """A Unix socket the server's agent plane also listens on: the fast lane's way in when there is one."""

    @cached_property
    def post_head(self) -> bytes:
        """An HTTP/1.1 POST to this server up to its last header line (no CRLF after it): its request
        line, Host, the server's token and the generation; what the gateway's fast lane sends first."""
        lines = [f"POST {self.path} HTTP/1.1", f"host: {self.host}:{self.port}"]
        if self.token:
            lines.append(f"authorization: Bearer {self.token}")
        if self.generation is not None:
            lines.append(f"{GENERATION_HEADER}: {self.generation}")
        return "\r\n".join(lines).encode()


@dataclass(eq=False)
class Server:
    """One running environment server and the instances placed on it."""

    id: str
    spec: EnvSpec
    client: ServerClient
    dedicated: bool
    agent_address: tuple[str, int] | None = None
    """Host and port of its MCP agent plane; None for in-process servers (no MCP URL)."""
    agent_token: str | None = None
    agent_socket: str | None = None
    """A Unix socket serving its agent plane too, on this machine (`Upstream.socket`)."""
    handle: Any = None
    """Backend-private (a Docker container, an `InstanceStore`, an actor handle)."""
    instances: set[str] = field(default_factory=set)
    snapshots: set[str] = field(default_factory=set)
    """sha256 of the snapshots this runtime knows the server keeps (sent there, or taken there)."""
    uploads: dict[str, Any] = field(default_factory=dict)
    """Snapshot uploads in flight, so that a fork sends each state once."""
    generation: int | None = None
    """Which process of a recyclable server runs now (None: not recyclable); its sandbox pins it."""

    def upstream(self, path: str, generation: int | None = None) -> Upstream | None:
        if self.agent_address is None:
            return None
        host, port = self.agent_address
        return Upstream(host, port, path, self.agent_token, self.id, generation, self.agent_socket)


class Backend(abc.ABC):
    """Starts, watches and stops environment servers."""

    name: str

    @abc.abstractmethod
    async def resolve(self, ref: Any) -> EnvSpec:
        """An environment reference (name, name:version, digest, image, `Environment`) -> `EnvSpec`."""

    @abc.abstractmethod
    async def start(self, spec: EnvSpec, *, dedicated: bool) -> Server:
        """Start one server and return once it answers. A dedicated server hosts one sandbox."""

    @abc.abstractmethod
    async def stop(self, server: Server) -> None:
        """Stop a server and free what it holds (idempotent)."""

    async def recycle(self, server: Server) -> bool:
        """Make a dedicated server fresh for its next sandbox (a new server process, nothing kept) and
        return True once it answers; False when this backend or server cannot (then it is stopped)."""
        return False

    @abc.abstractmethod
    async def status(self, server: Server) -> str:
        """``"running"``, or why not (``"exited (exit code 137, OOM-killed)"``, ``"removed"``)."""

    async def logs(self, server: Server, tail: int) -> str:
        """The last `tail` lines of what the server printed (its container's output)."""
        from envreg.errors import Conflict

        raise Conflict(
            f"{type(self).__name__} servers keep no log here",
            "logs are kept for the Docker tiers (container, instance); a local sandbox runs in its runtime's "
            "process, whose own output is its log",
        )

    def watch(self, on_death: Callable[..., None]) -> None:  # noqa: B027 - optional
        """Call `on_death(server_id)` (or `on_death(server_id, reason)`) from the event loop when a server dies
        (backends that can tell)."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Stop every server and free every resource this backend made."""
