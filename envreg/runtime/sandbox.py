"""`Sandbox`: one isolated environment instance, the same API on every isolation tier."""

from __future__ import annotations

import abc
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import httpx2
from pydantic import ValidationError

from envreg.canonical import canonical_json, sha256_hex
from envreg.env import Instance, ToolResult
from envreg.env.augment import Augmentation, Augmenter
from envreg.runtime.errors import InvalidState, SandboxGone
from envreg.runtime.snapshots import Snapshot

if TYPE_CHECKING:
    from envreg.runtime.docker_backend import EnvContainer
    from envreg.runtime.remote import EnvClient
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
        self.ended: str | None = None
        self.expires_at: float | None = None

    def renew(self, ttl: float) -> float:
        """Extend the lease to `ttl` seconds from now; returns the new expiry (epoch seconds)."""
        self._check()
        self.expires_at = time.time() + ttl
        return self.expires_at

    def _check(self) -> None:
        if self.ended is not None:
            raise SandboxGone(f"sandbox {self.id} has ended: {self.ended}")

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

    augmented: bool = False

    async def augment(self, augmentation: Augmentation | dict[str, Any] | None) -> None:
        """Apply an oracle-preserving augmentation to this sandbox's tool results (None removes it).

        It applies wherever the results are produced, so an agent on the MCP URL gets it too;
        a new augmentation starts a fresh label log.
        """
        config = None if augmentation is None else Augmentation.model_validate(augmentation)
        await self._augment(config)
        self.augmented = config is not None

    async def augmentation_labels(self) -> list[dict[str, Any]]:
        """What the augmentation did to each call since it was applied (or since the last reset)."""
        return await self._labels() if self.augmented else []

    @abc.abstractmethod
    async def _augment(self, config: Augmentation | None) -> None: ...

    @abc.abstractmethod
    async def _labels(self) -> list[dict[str, Any]]: ...

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

    async def close(self, reason: str = "closed") -> None:
        """End the sandbox and free what it holds; later calls raise `SandboxGone`."""
        if not self.closed:
            self.closed = True
            self.ended = self.ended or reason
            self.runtime._forget(self)
            await self._release()

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
        self.augmenter: Augmenter | None = None

    async def list_tools(self) -> list[dict[str, Any]]:
        self._check()
        return self.augmenter.tools if self.augmenter else self.instance.env.list_tools()

    async def call_tool(self, name: str, arguments: dict[str, Any] | None = None) -> ToolResult:
        self._check()
        if self.augmenter is not None:
            return self.augmenter.call(self.instance, name, arguments)
        return self.instance.call_tool(name, arguments)

    async def _augment(self, config: Augmentation | None) -> None:
        self._check()
        self.augmenter = None if config is None else Augmenter(config, self.instance.env.list_tools())

    async def _labels(self) -> list[dict[str, Any]]:
        return list(self.augmenter.log) if self.augmenter else []

    async def state(self) -> dict[str, Any]:
        self._check()
        return self.instance.state.to_json()

    async def state_sha256(self) -> str:
        self._check()
        return self.instance.state.sha256()

    async def load_state(self, state: dict[str, Any]) -> None:
        self._check()
        try:
            self.instance.load_state(state)
        except ValidationError as exc:
            raise InvalidState(
                f"invalid state, nothing was changed: {exc}", exc.errors(include_url=False)
            ) from None

    async def reset(self) -> None:
        self._check()
        self.instance.reset()
        if self.augmenter is not None:
            self.augmenter.reset()

    async def _release(self) -> None:
        pass


class RemoteSandbox(Sandbox):
    """A sandbox served by an environment container: its own container, or an instance in a shared one."""

    def __init__(
        self,
        runtime: Runtime,
        isolation: str,
        container: EnvContainer,
        client: EnvClient,
        instance_id: str,
        token: str,
    ) -> None:
        super().__init__(runtime, container.env_name, container.env_digest)
        self.isolation = isolation
        self.container = container
        self.client = client
        self.instance_id = instance_id
        self.path = "/mcp" if instance_id == "default" else f"/i/{instance_id}/mcp"
        self.token = token

    @property
    def upstream_url(self) -> str:
        """Where the gateway forwards this sandbox's MCP traffic."""
        return self.container.agent_url + self.path

    async def _guard(self, call: Callable[[], Awaitable[Any]]) -> Any:
        self._check()
        try:
            return await call()
        except (httpx2.TransportError, SandboxGone) as exc:
            status = await self.runtime._container_status(self.container)
            if status != "running":
                self.ended = f"its container is {status}"
                await self.close(self.ended)
                raise SandboxGone(f"sandbox {self.id} has ended: its container is {status}") from None
            raise SandboxGone(f"sandbox {self.id}: the environment server did not answer ({exc})") from exc

    async def list_tools(self) -> list[dict[str, Any]]:
        return await self._guard(lambda: self.client.list_tools(self.path))

    async def call_tool(self, name: str, arguments: dict[str, Any] | None = None) -> ToolResult:
        return await self._guard(lambda: self.client.call_tool(self.path, name, arguments))

    async def state(self) -> dict[str, Any]:
        return (await self._guard(lambda: self.client.get_state(self.instance_id)))["state"]

    async def state_sha256(self) -> str:
        return (await self._guard(lambda: self.client.get_state(self.instance_id)))["sha256"]

    async def load_state(self, state: dict[str, Any]) -> None:
        await self._guard(lambda: self.client.put_state(self.instance_id, state))

    async def reset(self) -> None:
        await self._guard(lambda: self.client.reset(self.instance_id))

    async def _augment(self, config: Augmentation | None) -> None:
        await self._guard(lambda: self.client.augment(self.instance_id, config))

    async def _labels(self) -> list[dict[str, Any]]:
        return (await self._guard(lambda: self.client.augmentation(self.instance_id)))["labels"]

    async def _release(self) -> None:
        await self.runtime._release_remote(self)
