"""The live instances one server process holds, each reached at its own URL path."""

from __future__ import annotations

import re
import secrets
from typing import Any

from envreg.env import Environment, Instance
from envreg.errors import LimitReached
from envreg.protocol import DEFAULT_INSTANCE

_INSTANCE_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class InstanceLimitReached(LimitReached):
    """The server holds its maximum number of instances."""


class InstanceStore:
    """Instances by id. The id is the only key: isolation never depends on an MCP session."""

    def __init__(self, env: Environment, max_instances: int = 4096, default: bool = True) -> None:
        self.env = env
        self.max_instances = max_instances
        self._instances: dict[str, Instance] = {}
        if default:
            self._instances[DEFAULT_INSTANCE] = env.instance()

    def __len__(self) -> int:
        return len(self._instances)

    def __contains__(self, instance_id: str) -> bool:
        return instance_id in self._instances

    def get(self, instance_id: str) -> Instance | None:
        return self._instances.get(instance_id)

    def ids(self) -> list[str]:
        return list(self._instances)

    def create(
        self, state: dict[str, Any] | None = None, instance_id: str | None = None
    ) -> tuple[str, Instance]:
        """Create an instance from `state` (or the seed). Raises `pydantic.ValidationError` on a bad state."""
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
        self._instances[instance_id] = instance
        return instance_id, instance

    def delete(self, instance_id: str) -> bool:
        return self._instances.pop(instance_id, None) is not None


def instance_id_from_path(path: str) -> str | None:
    """``/mcp`` -> the default instance, ``/i/<id>/mcp`` -> `<id>`, anything else -> None."""
    if path in ("/mcp", "/mcp/"):
        return DEFAULT_INSTANCE
    if path.startswith("/i/"):
        parts = path[3:].rstrip("/").split("/")
        if len(parts) == 2 and parts[1] == "mcp" and parts[0]:
            return parts[0]
    return None
