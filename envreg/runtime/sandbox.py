"""`Sandbox`: one isolated environment instance a conversation owns, the same API on every tier."""

from __future__ import annotations

import secrets
import time
from collections.abc import Awaitable, Callable
from functools import cached_property
from typing import Any, TypeVar

import anyio

from envreg.env import ToolResult
from envreg.env.augment import Augmentation
from envreg.errors import SandboxGone, UpstreamConnectTimeout, UpstreamDropped, UpstreamError
from envreg.protocol import agent_path
from envreg.runtime.backends.base import Server, Upstream
from envreg.runtime.snapshots import Snapshot, SnapshotStore

T = TypeVar("T")
CONNECT_ATTEMPTS = 3  # a connection that timed out is made again while the server still runs
DEATH_SETTLE = (0.1, 0.4, 1.0)  # seconds between looks at a server whose connection dropped


async def restore_on(server: Server, instance_id: str, snap: Snapshot) -> None:
    """Restore `snap` into an instance of `server`, sending the snapshot first if the server lacks it."""
    if snap.sha256 not in server.snapshots:
        await upload_once(server, snap)
    if await server.client.restore(instance_id, snap.sha256):
        return
    server.snapshots.discard(snap.sha256)  # it went from the server's cache meanwhile
    await upload_once(server, snap)
    if not await server.client.restore(instance_id, snap.sha256):
        raise UpstreamError(f"the environment server did not keep snapshot {snap.id[:19]}")


async def upload_once(server: Server, snap: Snapshot) -> None:
    """Send a snapshot to a server; concurrent restores of it (a fork) wait for one upload."""
    while snap.sha256 not in server.snapshots:
        pending = server.uploads.get(snap.sha256)
        if pending is not None:
            await pending.wait()
            continue
        done = server.uploads[snap.sha256] = anyio.Event()
        try:
            await server.client.upload_snapshot(snap)
            server.snapshots.add(snap.sha256)
        finally:
            del server.uploads[snap.sha256]
            done.set()


class Sandbox:
    """An environment instance on a server: tool calls, state, snapshot / restore, a lease.

    Made by `Runtime.sandbox` / `Runtime.fork`; ``mcp_url`` and ``token`` are what an external MCP
    agent needs (Docker tiers, through the gateway).
    """

    def __init__(
        self,
        server: Server,
        instance_id: str,
        isolation: str,
        *,
        snapshots: SnapshotStore,
        release: Callable[[Sandbox], Awaitable[None]],
        server_status: Callable[[Server], Awaitable[str]],
        server_noun: str = "server",
    ) -> None:
        self.id = "sb_" + secrets.token_hex(8)
        self.server = server
        self.instance_id = instance_id
        self.isolation = isolation
        self.env = server.spec.name
        self.env_digest = server.spec.digest
        self.token = secrets.token_urlsafe(24) if server.agent_address else None
        self.mcp_url: str | None = None
        self.closed = False
        self.ended: str | None = None
        self.expires_at: float | None = None
        self.augmented = False
        self.generation = server.generation
        """The server process leased to this sandbox: a recycled one refuses what it still sends."""
        pinned = getattr(server.client, "pinned", None)
        self._client = (
            pinned(server.generation) if server.generation is not None and pinned else server.client
        )
        self._snapshots = snapshots
        self._release = release
        self._server_status = server_status
        self._server_noun = server_noun

    @cached_property
    def upstream(self) -> Upstream | None:
        """Where the gateway forwards this sandbox's MCP traffic (None without an agent plane); fixed for
        the sandbox's life (its server, instance and server process), so made once, with its request head."""
        return self.server.upstream(agent_path(self.instance_id), self.generation)

    def renew(self, ttl: float) -> float:
        """Extend the lease to `ttl` seconds from now; returns the new expiry (epoch seconds)."""
        self._check()
        self.expires_at = time.time() + ttl
        return self.expires_at

    def _check(self) -> None:
        if self.ended is not None:
            raise SandboxGone(f"sandbox {self.id} has ended: {self.ended}")

    async def _guard(self, call: Callable[[], Awaitable[T]]) -> T:
        """Run a server call; if it fails because the server is gone, end the sandbox and say so.

        A connection that timed out sent nothing, so it is made again while the server still runs
        (a SYN lost on a loaded host); a server that stopped ends the sandbox after one timeout.
        """
        self._check()
        for attempt in range(1, CONNECT_ATTEMPTS + 1):
            try:
                return await call()
            except (UpstreamError, SandboxGone) as exc:
                if self.ended is not None:  # it ended while this call was in flight: not answered
                    raise SandboxGone(
                        f"sandbox {self.id} has ended ({self.ended}) while this call was in flight: {exc}"
                    ) from None
                status = await self._server_status(self.server)
                if status == "running" and isinstance(exc, UpstreamDropped):
                    status = await self._settled_status()  # a dropped connection: was it the process dying?
                if status != "running":
                    await self.close(f"its {self._server_noun} is {status}")
                    raise SandboxGone(f"sandbox {self.id} has ended: {self.ended}") from None
                if not isinstance(exc, UpstreamConnectTimeout) or attempt == CONNECT_ATTEMPTS:
                    raise exc from None
        raise AssertionError("unreachable")

    async def _settled_status(self) -> str:
        """The server's status once the engine caught up with a process that may have just died (an OOM
        kill shows as a reset connection some milliseconds before the container counts as exited)."""
        status = "running"
        for pause in DEATH_SETTLE:
            await anyio.sleep(pause)
            status = await self._server_status(self.server)
            if status != "running":
                break
        return status

    async def list_tools(self) -> list[dict[str, Any]]:
        """The environment's tools in MCP wire form."""
        return await self._guard(lambda: self._client.list_tools(self.instance_id))

    async def call_tool(self, name: str, arguments: dict[str, Any] | None = None) -> ToolResult:
        """Call a tool; raises `UnknownToolError` for a name the environment lacks."""
        return await self._guard(lambda: self._client.call_tool(self.instance_id, name, arguments))

    async def state(self) -> dict[str, Any]:
        """The current state as JSON data."""
        return await self._guard(lambda: self._client.get_state(self.instance_id))

    async def state_sha256(self) -> str:
        """sha256 of the canonical state."""
        return await self._guard(lambda: self._client.state_sha256(self.instance_id))

    async def load_state(self, state: dict[str, Any]) -> None:
        """Replace the state; raises `InvalidState` (state kept) when it is invalid."""
        await self._guard(lambda: self._client.put_state(self.instance_id, state))

    async def reset(self) -> None:
        """Back to the environment's seed state (an augmentation starts a new label log)."""
        await self._guard(lambda: self._client.reset(self.instance_id))

    async def augment(self, augmentation: Augmentation | dict[str, Any] | None) -> None:
        """Apply an oracle-preserving augmentation to this sandbox's tool results (None removes it).

        It applies where the results are produced (the environment server's instance), so an agent
        on the MCP URL gets it too; a new augmentation starts a fresh label log. See `envreg.env.augment`.
        """
        config = None if augmentation is None else Augmentation.model_validate(augmentation)
        await self._guard(lambda: self._client.augment(self.instance_id, config))
        self.augmented = config is not None

    async def augmentation_labels(self) -> list[dict[str, Any]]:
        """What the augmentation did to each call since it was applied (or since the last reset)."""
        if not self.augmented:
            return []
        return await self._guard(lambda: self._client.augmentation_labels(self.instance_id))

    async def snapshot(self) -> Snapshot:
        """Keep the current state on its server and on disk (content-addressed); return its handle.

        The server keeps the state itself (no copy); the state crosses to this host only when the
        store does not hold it yet."""
        sha = await self._guard(lambda: self._client.snapshot(self.instance_id))
        self.server.snapshots.add(sha)
        known = self._snapshots.known(self.env, self.env_digest, sha)
        if known is not None:
            return known
        payload = await self._guard(lambda: self._client.snapshot_payload(sha))
        return self._snapshots.put_canonical(self.env, self.env_digest, payload, sha)

    async def restore(self, snapshot: Snapshot | str) -> None:
        """Load a snapshot taken from the same environment (refused otherwise, state untouched).

        A server that keeps the snapshot restores it by hash, without a copy; one that does not
        gets it once (compressed) and keeps it for the next restores and forks."""
        snap = self._snapshots.get(snapshot) if isinstance(snapshot, str) else snapshot
        snap.check_compatible(self.env, self.env_digest)
        await self._guard(lambda: restore_on(self.server, self.instance_id, snap))

    async def close(self, reason: str = "closed") -> None:
        """End the sandbox and free what it holds; later calls raise `SandboxGone`."""
        if not self.closed:
            self.closed = True
            self.ended = self.ended or reason
            await self._release(self)

    async def __aenter__(self) -> Sandbox:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"<Sandbox {self.id} {self.env} isolation={self.isolation}>"
