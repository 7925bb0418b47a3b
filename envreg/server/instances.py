"""The live instances one server process holds, each reached at its own URL path, and the memory their
states may take together (admission control for shared servers)."""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from envreg.env import Environment, Instance, ToolResult
from envreg.errors import LimitReached
from envreg.protocol import DEFAULT_INSTANCE
from envreg.server.snapshots import DEFAULT_BUDGET, SnapshotCache

if TYPE_CHECKING:  # imported when an instance is augmented: most servers never are
    from envreg.env.augment import Augmentation, Augmenter

_INSTANCE_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


STATE_OVERHEAD = 6
"""Bytes of memory per byte of a state's compact JSON once parsed (about 5 for record-heavy states, measured
with tracemalloc: 29.2 MB for a 5.7 MB calendar state), and headroom."""
STATE_SHARE = 3
"""The states of one server may take a third of its memory limit; the rest is the process's and its sessions'."""


def state_budget(memory: int) -> int:
    """Bytes of compact JSON that the states of a server with `memory` bytes may hold together: 14 MiB in a
    256 MiB container."""
    return memory // STATE_SHARE // STATE_OVERHEAD


class InstanceLimitReached(LimitReached):
    """The server holds its maximum number of instances, or its states their memory budget."""


def _mib(n: int) -> str:
    return f"{n / 1048576:.1f} MiB"


class InstanceStore:
    """Instances by id (the only key: isolation never depends on an MCP session), and the snapshots
    this server keeps for restores and forks."""

    def __init__(
        self,
        env: Environment,
        max_instances: int = 4096,
        default: bool = True,
        snapshot_budget: int = DEFAULT_BUDGET,
        state_budget: int | None = None,
    ) -> None:
        self.env = env
        self.max_instances = max_instances
        self.state_budget = state_budget
        """Bytes of compact JSON all instances' states may hold together (None: no budget). Each state counts
        whole, even where forks share parts of it: the budget errs on the safe side."""
        self.snapshots = SnapshotCache(snapshot_budget)
        self._instances: dict[str, Instance] = {}
        self._sizes: dict[str, int] = {}
        self.state_bytes = 0
        """What the instances' states hold now, in bytes of compact JSON."""
        self._augmenters: dict[str, Augmenter] = {}
        self._on_delete: list[Callable[[str], None]] = []
        if default:
            self._instances[DEFAULT_INSTANCE] = env.instance()
            self._account(DEFAULT_INSTANCE)

    def __len__(self) -> int:
        return len(self._instances)

    def __contains__(self, instance_id: str) -> bool:
        return instance_id in self._instances

    def get(self, instance_id: str) -> Instance | None:
        return self._instances.get(instance_id)

    def ids(self) -> list[str]:
        return list(self._instances)

    def create(self, state: Any = None, instance_id: str | None = None) -> tuple[str, Instance]:
        """Create an instance from `state` (a state, a committed state shared as it is, or the seed).
        Raises `pydantic.ValidationError` on a bad state."""
        if len(self._instances) >= self.max_instances:
            raise InstanceLimitReached(
                f"this server already holds its maximum of {self.max_instances} instances"
            )
        if instance_id is None:
            instance_id = secrets.token_urlsafe(12)
        elif not _INSTANCE_ID.match(instance_id):
            raise ValueError("instance id must be 1-64 characters of A-Z, a-z, 0-9, '_' or '-'")
        elif instance_id in self._instances:
            raise KeyError(f"instance {instance_id!r} already exists")
        instance = self.env.instance(state)
        if (problem := self._over_budget(instance.size)) is not None:
            raise InstanceLimitReached(f"no instance was created: {problem}")
        self._instances[instance_id] = instance
        self._account(instance_id)
        return instance_id, instance

    def load_state(self, instance_id: str, state: Any) -> Instance:
        """Replace an instance's state (`Instance.load_state`); over the memory budget, the old state stays
        and `InstanceLimitReached` says so. Raises `KeyError` and `pydantic.ValidationError`."""
        instance = self._instances[instance_id]
        old = instance.state
        instance.load_state(state)
        if (problem := self._over_budget(instance.size, instance_id)) is not None:
            instance.state = old
            raise InstanceLimitReached(f"the state was not replaced: {problem}")
        self._account(instance_id)
        return instance

    def _over_budget(self, size: int, instance_id: str | None = None) -> str | None:
        """Why a state of `size` bytes (for `instance_id`, replacing its own) does not fit, or None."""
        if self.state_budget is None:
            return None
        total = self.state_bytes - self._sizes.get(instance_id or "", 0) + size
        if total <= self.state_budget:
            return None
        return (
            f"the states this server holds would take {_mib(total)} together (this one {_mib(size)}), over "
            f"its state budget of {_mib(self.state_budget)} (sized to its memory limit, which the sandboxes "
            "of a shared server share)"
        )

    def _account(self, instance_id: str) -> None:
        size = self._instances[instance_id].size
        self.state_bytes += size - self._sizes.get(instance_id, 0)
        self._sizes[instance_id] = size

    def delete(self, instance_id: str) -> bool:
        self._augmenters.pop(instance_id, None)
        if self._instances.pop(instance_id, None) is None:
            return False
        self.state_bytes -= self._sizes.pop(instance_id, 0)
        for callback in self._on_delete:
            callback(instance_id)
        return True

    def watch_deletes(self, callback: Callable[[str], None]) -> None:
        """Call `callback(instance_id)` whenever an instance is deleted (its MCP sessions end with it)."""
        self._on_delete.append(callback)

    def call_tool(self, instance_id: str, name: str, arguments: dict[str, Any] | None) -> ToolResult:
        """Run one tool on an instance, through its augmentation when it has one.

        Raises `KeyError` for an unknown instance and `UnknownToolError` for a tool it does not offer.
        """
        instance = self._instances[instance_id]
        augmenter = self._augmenters.get(instance_id)
        old = instance.state
        if augmenter is not None:
            result = augmenter.call(instance, name, arguments)
        else:
            result = instance.call_tool(name, arguments)
        if instance.state is old:
            return result
        if (problem := self._over_budget(instance.size, instance_id)) is not None:
            instance.state = old  # committed states are immutable: the old one is intact
            return ToolResult(
                error=f"Refused: {problem}; nothing was changed. Remove something first, or use a sandbox "
                'of its own (isolation "container").'
            )
        self._account(instance_id)
        return result

    def list_tools(self, instance_id: str) -> list[dict[str, Any]]:
        """The tools an instance offers in MCP wire form (with its augmentation's decoys, if any)."""
        augmenter = self._augmenters.get(instance_id)
        return augmenter.tools if augmenter is not None else self.env.list_tools()

    def offers(self, instance_id: str, name: str) -> bool:
        """Whether `name` is a tool of the instance (one of the environment's, or a decoy)."""
        augmenter = self._augmenters.get(instance_id)
        return name in self.env.tools or (augmenter is not None and name in augmenter.distractors)

    def reset(self, instance_id: str) -> Instance:
        """Back to the seed state; an augmentation starts a new label log. Raises `KeyError`."""
        instance = self._instances[instance_id]
        instance.reset()
        self._account(instance_id)
        augmenter = self._augmenters.get(instance_id)
        if augmenter is not None:
            augmenter.reset()
        return instance

    def augmenter(self, instance_id: str) -> Augmenter | None:
        """The instance's augmentation, if one was set (see `envreg.env.augment`)."""
        return self._augmenters.get(instance_id)

    def augment(self, instance_id: str, config: Augmentation | None) -> Augmenter | None:
        """Set (or with None remove) an instance's augmentation; a new one starts a fresh label log."""
        if config is None:
            self._augmenters.pop(instance_id, None)
            return None
        from envreg.env.augment import Augmenter

        augmenter = self._augmenters[instance_id] = Augmenter(config, self.env.list_tools())
        return augmenter


def instance_id_from_path(path: str) -> str | None:
    """``/mcp`` -> the default instance, ``/i/<id>/mcp`` -> `<id>`, anything else -> None."""
    if path in ("/mcp", "/mcp/"):
        return DEFAULT_INSTANCE
    if path.startswith("/i/"):
        parts = path[3:].rstrip("/").split("/")
        if len(parts) == 2 and parts[1] == "mcp" and parts[0]:
            return parts[0]
    return None
