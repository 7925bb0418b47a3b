"""Configuration read from the environment, in one place: every ``ENVREG_*`` variable envreg honours.

| variable | meaning | default |
| --- | --- | --- |
| `ENVREG_HOME` | index, snapshots, daemon.json, caches | `~/.envreg` |
| `ENVREG_IMAGES` | where environments are looked up by name | `./images`, else the catalog's (`envreg.resources`) |
| `ENVREG_ROOT` | the envreg checkout that `envreg build` builds from | found from the cwd, else the installed catalog |
| `ENVREG_MANIFESTS` | the committed manifests (read by catalog, search, synth; written by build) | `./manifests`, else the catalog's |
| `ENVREG_IMAGE_PREFIX` | repository prefix of the images `envreg build` tags (`<prefix>/<name>`, `<prefix>/base`) | `envreg/` |
| `ENVREG_REGISTRY` | default OCI registry for push / pull / search | none |
| `ENVREG_REGISTRY_USERNAME`, `ENVREG_REGISTRY_PASSWORD` | registry credentials | Docker's store |
| `ENVREG_INSECURE_REGISTRIES` | comma-separated registries spoken to over plain HTTP | loopback only |
| `ENVREG_DAEMON_URL`, `ENVREG_TOKEN` | the daemon the CLI talks to (else `$ENVREG_HOME/daemon.json`) | none |
| `ENVREG_AGENT_TOKEN` | bearer token an environment server requires on its MCP agent plane | none |
| `ENVREG_REWARD_TOKEN` | bearer token of `envreg reward serve` | a new one |
| `ENVREG_CACHE` | embedding cache of synthesis and distractor ranking | `$ENVREG_HOME/cache` |
| `ENVREG_PROGRESS` | `1` forces progress bars even without a terminal | unset |
| `ENVREG_STARTUP_TRACE` | `1` makes an environment server print where its start went | unset |
| `ENVREG_DEBUG` | `1` lets the CLI show the traceback of an error instead of `error:` + `hint:` | unset |
| `ENVREG_FOREIGN_CODE` | `allow` lets this process import foreign environment folders (set in sandboxes and environment images) | unset: refused |
"""

from __future__ import annotations

import os
from pathlib import Path


def _get(name: str) -> str | None:
    return os.environ.get(name) or None


def envreg_home() -> Path:
    """``$ENVREG_HOME`` (default ``~/.envreg``), created on first use."""
    home = home_path()
    home.mkdir(parents=True, exist_ok=True)
    return home


def home_path() -> Path:
    """Where ``$ENVREG_HOME`` is (default ``~/.envreg``), without creating it."""
    return Path(_get("ENVREG_HOME") or Path.home() / ".envreg")


def images_root() -> Path:
    """Where environments are looked up by name: ``$ENVREG_IMAGES``, else ``./images`` when it exists, else
    the catalog's folder (the checkout's, or the copy the wheel carries)."""
    if value := _get("ENVREG_IMAGES"):
        return Path(value)
    from envreg.resources import default_images

    return default_images()


def checkout_root() -> Path | None:
    """``$ENVREG_ROOT`` when set."""
    value = _get("ENVREG_ROOT")
    return Path(value).resolve() if value else None


def manifests_dir() -> Path | None:
    """``$ENVREG_MANIFESTS`` when set."""
    value = _get("ENVREG_MANIFESTS")
    return Path(value) if value else None


def manifests_root() -> Path:
    """The committed manifests: ``$ENVREG_MANIFESTS``, else ``./manifests`` when it exists, else the catalog's."""
    if (value := manifests_dir()) is not None:
        return value
    from envreg.resources import default_manifests

    return default_manifests()


def image_prefix() -> str:
    """The local image repository prefix, always ending in ``/``: ``ENVREG_IMAGE_PREFIX=team`` tags
    ``team/calendar:1.0.0`` and ``team/base:0.1.0`` (``team/`` and ``team`` mean the same)."""
    value = (_get("ENVREG_IMAGE_PREFIX") or "envreg/").strip().rstrip("/")
    return f"{value}/"


def default_registry() -> str | None:
    return _get("ENVREG_REGISTRY")


def registry_credentials() -> tuple[str, str] | None:
    user = _get("ENVREG_REGISTRY_USERNAME")
    return (user, os.environ.get("ENVREG_REGISTRY_PASSWORD", "")) if user else None


def insecure_registries() -> list[str]:
    return [r.strip() for r in (_get("ENVREG_INSECURE_REGISTRIES") or "").split(",") if r.strip()]


def daemon_override() -> tuple[str | None, str | None]:
    """(``$ENVREG_DAEMON_URL``, ``$ENVREG_TOKEN``)."""
    return _get("ENVREG_DAEMON_URL"), daemon_token()


def daemon_token() -> str | None:
    return _get("ENVREG_TOKEN")


def reward_token() -> str | None:
    return _get("ENVREG_REWARD_TOKEN")


def cache_dir() -> Path:
    value = _get("ENVREG_CACHE")
    return Path(value) if value else envreg_home() / "cache"


def startup_trace() -> bool:
    return bool(_get("ENVREG_STARTUP_TRACE"))


def debug() -> bool:
    return _get("ENVREG_DEBUG") == "1"


def force_progress() -> bool:
    return _get("ENVREG_PROGRESS") == "1"


def foreign_code_allowed() -> bool:
    """Whether this process may import foreign environment folders: only in sandboxes and images, unless told."""
    return _get("ENVREG_FOREIGN_CODE") == "allow"
