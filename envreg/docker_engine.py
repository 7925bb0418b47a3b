"""The Docker engine: the one place envreg makes a Docker client, checks the engine, and translates its errors.

Clear errors that say how to fix it: in a checkout, `scripts/setup-docker`; for a wheel install, what to install.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from typing import Any

from envreg.errors import EngineError, ImageNotFound

SETUP = "scripts/setup-docker"


class EngineUnavailable(EngineError):
    """The Docker engine (or buildx) cannot be used; the message says why and how to fix it."""


def _is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def _fix_hint() -> str:
    from envreg.resources import checkout_root

    root = checkout_root()
    if root is None or not (root / SETUP).is_file():
        return (
            "install Docker Engine with the buildx plugin (Debian/Ubuntu: `apt-get install docker.io "
            "docker-buildx`), start it (`systemctl start docker`), and use an account that may use it "
            "(root, or the docker group); or point DOCKER_HOST at an engine"
        )
    if _is_root():
        return f"run `{SETUP}` (it installs and starts what is missing)"
    return f"run `sudo {SETUP}` (as root: it installs and starts what is missing), or use an account that may use Docker"


def engine_problem(*, buildx: bool = False, timeout: float = 20) -> str | None:
    """None when the engine answers (and buildx runs, if asked for); else what is wrong."""
    if not shutil.which("docker"):
        return "the docker CLI is not installed"
    try:
        proc = subprocess.run(
            ["docker", "info", "--format", "{{.ServerVersion}}"],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return f"the Docker engine did not answer `docker info` within {timeout:.0f}s"
    if proc.returncode != 0 or not proc.stdout.strip():
        msg = (proc.stderr or proc.stdout).strip().splitlines()
        detail = msg[-1] if msg else "no answer"
        if "permission denied" in detail.lower():
            return f"no permission to use the Docker engine ({detail})"
        return f"the Docker engine is not running ({detail})"
    if buildx:
        bx = subprocess.run(["docker", "buildx", "version"], capture_output=True, text=True, timeout=timeout)
        if bx.returncode != 0:
            return "docker buildx is not installed (the docker-buildx CLI plugin)"
    return None


def require_engine(*, buildx: bool = False) -> None:
    """Raise `EngineUnavailable` naming the fix when the engine (or buildx) cannot be used."""
    if problem := engine_problem(buildx=buildx):
        raise EngineUnavailable(problem, _fix_hint())


def engine_available(*, buildx: bool = False) -> bool:
    return engine_problem(buildx=buildx) is None


def docker_client(timeout: int = 60) -> Any:
    """A Docker SDK client for the engine `DOCKER_HOST` names; `EngineUnavailable` when it does not answer."""
    import docker

    try:
        client = docker.from_env(timeout=timeout)
        client.ping()
    except docker.errors.DockerException as exc:
        raise EngineUnavailable(f"the Docker engine is not usable ({exc})", _fix_hint()) from None
    return client


@contextlib.contextmanager
def engine_errors(doing: str) -> Iterator[None]:
    """Docker SDK errors raised inside as `EngineError` / `ImageNotFound` saying what was being done."""
    import docker.errors

    try:
        yield
    except docker.errors.ImageNotFound as exc:
        raise ImageNotFound(
            f"{doing}: {exc.explanation or exc}", "build it (`envreg build`) or pull it"
        ) from None
    except docker.errors.APIError as exc:
        raise EngineError(f"{doing}: Docker engine: {exc.explanation or exc}") from None
    except docker.errors.DockerException as exc:
        raise EngineError(f"{doing}: Docker engine unavailable: {exc}", _fix_hint()) from None
