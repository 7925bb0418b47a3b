"""Backends: where environment servers run (`local` in process, `docker`, `ray`), behind one interface."""

from __future__ import annotations

from typing import Any

from envreg.errors import BadRequest
from envreg.runtime.backends.base import Backend, EnvSpec, Server, ServerClient, Upstream

BACKENDS = ("docker", "ray")


def create_backend(name: str, runtime_id: str, http: Any, **options: Any) -> Backend:
    """The backend called `name` for the isolated tiers (imported only when chosen)."""
    if name == "docker":
        from envreg.runtime.backends.docker import DockerBackend

        return DockerBackend(runtime_id, http, **options)
    if name == "ray":
        from envreg.runtime.backends.ray import RayBackend

        return RayBackend(runtime_id, http, **options)
    raise BadRequest(f"no backend {name!r}", f"choose one of {', '.join(BACKENDS)}")


__all__ = ["BACKENDS", "Backend", "EnvSpec", "Server", "ServerClient", "Upstream", "create_backend"]
