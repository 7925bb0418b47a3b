"""The local backend: environment servers inside this process (no isolation; tests, trusted reward replay).

A local server is an `InstanceStore` called directly, so a local sandbox costs a dictionary lookup
per call; results and state bytes are the same as on every other backend.
"""

from __future__ import annotations

import secrets
from functools import cache
from typing import Any

from pydantic import ValidationError

from envreg.env import Environment, ToolResult, load_environment
from envreg.env.augment import Augmentation
from envreg.errors import InvalidState, SandboxGone, SnapshotNotFound
from envreg.runtime.backends.base import Backend, EnvSpec, Server
from envreg.runtime.snapshots import Snapshot
from envreg.server.instances import InstanceStore
from envreg.server.snapshots import SnapshotRefused


@cache
def environment_digest(env: Environment) -> str:
    """The manifest digest that names an environment's exact code, schema and seed."""
    from envreg.manifest import build_manifest

    return build_manifest(env).digest


def invalid_state(exc: ValidationError) -> InvalidState:
    return InvalidState(
        f"invalid state, nothing was changed: {exc}",
        exc.errors(include_url=False, include_context=False),  # pyright: ignore[reportArgumentType]
    )


class InProcessClient:
    """`ServerClient` over an `InstanceStore` in this process."""

    def __init__(self, store: InstanceStore) -> None:
        self.store = store

    def _instance(self, instance_id: str) -> Any:
        instance = self.store.get(instance_id)
        if instance is None:
            raise SandboxGone(f"no instance {instance_id!r} on this server")
        return instance

    async def list_tools(self, instance_id: str) -> list[dict[str, Any]]:
        self._instance(instance_id)
        return self.store.list_tools(instance_id)

    async def call_tool(self, instance_id: str, name: str, arguments: dict[str, Any] | None) -> ToolResult:
        self._instance(instance_id)
        return self.store.call_tool(instance_id, name, arguments)

    async def get_state(self, instance_id: str) -> dict[str, Any]:
        return self._instance(instance_id).state.to_json()

    async def state_sha256(self, instance_id: str) -> str:
        return self._instance(instance_id).state.sha256()

    async def put_state(self, instance_id: str, state: dict[str, Any]) -> None:
        self._instance(instance_id)
        try:
            self.store.load_state(instance_id, state)
        except ValidationError as exc:
            raise invalid_state(exc) from None

    async def reset(self, instance_id: str) -> None:
        self._instance(instance_id)
        self.store.reset(instance_id)

    async def create_instance(self, state: dict[str, Any] | None = None) -> str:
        try:
            return self.store.create(state)[0]
        except ValidationError as exc:
            raise invalid_state(exc) from None

    async def delete_instance(self, instance_id: str) -> None:
        self.store.delete(instance_id)

    async def snapshot(self, instance_id: str) -> str:
        return self.store.snapshots.keep(self._instance(instance_id).state, self.store.env.committed)

    async def snapshot_payload(self, sha256: str) -> bytes:
        state = self.store.snapshots.get(sha256)
        if state is None:
            raise SnapshotNotFound(f"this server does not keep snapshot {sha256[:12]}...")
        return state.canonical().encode()

    async def restore(self, instance_id: str, sha256: str) -> bool:
        self._instance(instance_id)
        state = self.store.snapshots.get(sha256)
        if state is None:
            return False
        self.store.load_state(instance_id, state)
        return True

    async def upload_snapshot(self, snapshot: Snapshot) -> None:
        env = self.store.env
        try:
            self.store.snapshots.receive(snapshot.sha256, snapshot.canonical, None, env.committed, 1 << 40)
        except ValidationError as exc:
            raise invalid_state(exc) from None
        except SnapshotRefused as exc:
            raise InvalidState(str(exc)) from None

    async def augment(self, instance_id: str, config: Augmentation | None) -> None:
        self._instance(instance_id)
        self.store.augment(instance_id, config)

    async def augmentation_labels(self, instance_id: str) -> list[dict[str, Any]]:
        self._instance(instance_id)
        augmenter = self.store.augmenter(instance_id)
        return list(augmenter.log) if augmenter is not None else []


class LocalBackend(Backend):
    """Servers are instance stores in this process; they never die on their own."""

    name = "local"

    async def resolve(self, ref: Any) -> EnvSpec:
        env = ref if isinstance(ref, Environment) else load_environment(ref)
        digest = environment_digest(env)
        return EnvSpec(key=digest, name=env.name, digest=digest, payload=env)

    async def start(self, spec: EnvSpec, *, dedicated: bool) -> Server:
        store = InstanceStore(spec.payload, max_instances=1 << 30, default=False)
        return Server(
            id="local_" + secrets.token_hex(6),
            spec=spec,
            client=InProcessClient(store),
            dedicated=dedicated,
            handle=store,
        )

    async def stop(self, server: Server) -> None:
        server.instances.clear()

    async def status(self, server: Server) -> str:
        return "running"

    async def close(self) -> None:
        pass
