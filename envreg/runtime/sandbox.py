"""`Sandbox`: one isolated environment instance, the same API on every isolation tier."""

from __future__ import annotations

import abc
import secrets
from typing import TYPE_CHECKING, Any

from envreg.canonical import canonical_json, sha256_hex
from envreg.env import Instance, ToolResult
from envreg.runtime.snapshots import Snapshot, SnapshotStore

if TYPE_CHECKING:
    from envreg.runtime.runtime import Runtime


class Sandbox(abc.ABC):
    """An environment instance a conversation owns. Tool calls, state, snapshot / restore."""

    isolation: str
    mcp_url: str | None = None
    token: str | None = None

    def __init__(self, runtime: Runtime, env: str, env_digest: str) -> None:
        self.id = "sb_" + secrets.token_hex(8)
        self.runtime = runtime
        self.env = env
        self.env_digest = env_digest
        self.closed = False

    @abc.abstractmethod
    async def list_tools(self) -> list[dict[str, Any]]:
        """The environment's tools in MCP wire form."""

    @abc.abstractmethod
    async def call_tool(self, name: str, arguments: dict[str, Any] | None = None) -> ToolResult:
        """Call a tool; raises `UnknownToolError` for a name the environment lacks."""

    @abc.abstractmethod
    async def state(self) -> dict[str, Any]:
        """The current state as JSON data."""

    @abc.abstractmethod
    async def load_state(self, state: dict[str, Any]) -> None:
        """Replace the state; raises `pydantic.ValidationError` (state kept) when it is invalid."""

    @abc.abstractmethod
    async def reset(self) -> None:
        """Back to the environment's seed state."""

    @abc.abstractmethod
    async def _release(self) -> None: ...

    async def state_sha256(self) -> str:
        return sha256_hex(canonical_json(await self.state()))

    async def snapshot(self) -> Snapshot:
        """Store the current state, content-addressed, and return its handle."""
        return self.runtime.snapshots.put(self.env, self.env_digest, await self.state())

    async def restore(self, snapshot: Snapshot | str) -> None:
        """Load a snapshot taken from the same environment (refused otherwise, state untouched)."""
        snap = self.runtime.snapshots.get(snapshot) if isinstance(snapshot, str) else snapshot
        snap.check_compatible(self.env, self.env_digest)
        await self.load_state(snap.state)

    async def close(self) -> None:
        if not self.closed:
            self.closed = True
            await self._release()
            self.runtime._forget(self)

    async def __aenter__(self) -> Sandbox:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"<Sandbox {self.id} {self.env} isolation={self.isolation}>"


class LocalSandbox(Sandbox):
    """In-process tier: for tests and trusted reward replay. Same results as the isolated tiers."""

    isolation = "local"

    def __init__(self, runtime: Runtime, instance: Instance, env_digest: str) -> None:
        super().__init__(runtime, instance.env.name, env_digest)
        self.instance = instance

    async def list_tools(self) -> list[dict[str, Any]]:
        return self.instance.env.list_tools()

    async def call_tool(self, name: str, arguments: dict[str, Any] | None = None) -> ToolResult:
        return self.instance.call_tool(name, arguments)

    async def state(self) -> dict[str, Any]:
        return self.instance.state.to_json()

    async def state_sha256(self) -> str:
        return self.instance.state.sha256()

    async def load_state(self, state: dict[str, Any]) -> None:
        self.instance.load_state(state)

    async def reset(self) -> None:
        self.instance.reset()

    async def _release(self) -> None:
        pass


__all__ = ["LocalSandbox", "Sandbox", "SnapshotStore"]
