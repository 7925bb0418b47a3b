"""`Sandbox`: one isolated environment instance a conversation owns, the same API on every tier."""

from __future__ import annotations

import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from envreg.env import ToolResult
from envreg.env.augment import Augmentation
from envreg.errors import SandboxGone, UpstreamError
from envreg.protocol import agent_path
from envreg.runtime.backends.base import Server, Upstream
from envreg.runtime.snapshots import Snapshot, SnapshotStore

T = TypeVar("T")


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
        self._client = server.client
        self._snapshots = snapshots
        self._release = release
        self._server_status = server_status
        self._server_noun = server_noun

    @property
    def upstream(self) -> Upstream | None:
        """Where the gateway forwards this sandbox's MCP traffic (None without an agent plane)."""
        return self.server.upstream(agent_path(self.instance_id))

    def renew(self, ttl: float) -> float:
        """Extend the lease to `ttl` seconds from now; returns the new expiry (epoch seconds)."""
        self._check()
        self.expires_at = time.time() + ttl
        return self.expires_at

    def _check(self) -> None:
        if self.ended is not None:
            raise SandboxGone(f"sandbox {self.id} has ended: {self.ended}")

    async def _guard(self, call: Callable[[], Awaitable[T]]) -> T:
        """Run a server call; if it fails because the server is gone, end the sandbox and say so."""
        self._check()
        try:
            return await call()
        except (UpstreamError, SandboxGone) as exc:
            status = await self._server_status(self.server)
            if status != "running":
                await self.close(f"its {self._server_noun} is {status}")
                raise SandboxGone(f"sandbox {self.id} has ended: {self.ended}") from None
            raise exc from None

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
        """Store the current state, content-addressed, and return its handle."""
        return self._snapshots.put(self.env, self.env_digest, await self.state())

    async def restore(self, snapshot: Snapshot | str) -> None:
        """Load a snapshot taken from the same environment (refused otherwise, state untouched)."""
        snap = self._snapshots.get(snapshot) if isinstance(snapshot, str) else snapshot
        snap.check_compatible(self.env, self.env_digest)
        await self.load_state(snap.state)

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
