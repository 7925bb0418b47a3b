"""Pinned npm packages, with Node 22 itself from npm (`node@22`), installed on demand into a cache folder.

A *package set* is a folder holding a ``package.json`` (exact versions, ``node`` among them) and its
``package-lock.json``. `install` runs ``npm ci`` once per content of those two files into
``<cache>/<package name>-<hash>/`` (default cache: ``$ENVREG_HOME/cache/npm``), so changing a pin gives a fresh
folder and concurrent installers (processes, CI jobs) wait for one another. The installed ``node`` is the
pinned one whatever the machine's own Node is; only ``npm`` must be on PATH.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

from envreg.config import envreg_home
from envreg.errors import EnvregError

PIN_FILES = ("package.json", "package-lock.json")
NODE_MAJOR = "v22."
INSTALL_TIMEOUT = 1200


class NpmError(EnvregError):
    """npm is missing, or installing a package set failed."""

    status = 503


def default_cache() -> Path:
    return envreg_home() / "cache" / "npm"


def install(source: Path, cache: Path | None = None) -> Path:
    """The folder where the package set at `source` is installed, installing it first if needed.

    Files of `source` other than the pins (scripts such as ``*.mjs``) are copied beside ``node_modules``
    on every call, so the scripts that run are always the current ones.
    """
    pins = [(source / name).read_bytes() for name in PIN_FILES]
    name = json.loads(pins[0]).get("name") or source.name
    root = cache or default_cache()
    pinned = hashlib.sha256(b"\0".join(pins)).hexdigest()[:16]
    target = root / f"{name}-{pinned}"
    stamp = target / ".installed"
    if not stamp.exists():
        root.mkdir(parents=True, exist_ok=True)
        with open(root / ".install.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not stamp.exists():
                _npm_ci(source, target)
                stamp.write_text(_check_node(target) + "\n")
    for script in source.iterdir():
        if script.is_file() and script.name not in PIN_FILES:
            shutil.copy(script, target / script.name)
    return target


def _npm_ci(source: Path, target: Path) -> None:
    npm = shutil.which("npm")
    if npm is None:
        raise NpmError(
            f"npm is not installed: needed once to install {source.name} (pinned npm packages and Node 22)",
            "install it (Debian: `apt-get install -y npm`) and run the command again",
        )
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    for name in PIN_FILES:
        shutil.copy(source / name, target / name)
    try:
        proc = subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=target,
            capture_output=True,
            text=True,
            timeout=INSTALL_TIMEOUT,
        )
    except subprocess.TimeoutExpired:
        shutil.rmtree(target, ignore_errors=True)
        raise NpmError(
            f"npm ci for {source.name} took over {INSTALL_TIMEOUT}s", "check the npm registry"
        ) from None
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        shutil.rmtree(target, ignore_errors=True)
        raise NpmError(
            f"npm ci for {source.name} failed (exit {proc.returncode}):\n{tail}",
            "check that the npm registry is reachable (`npm ping`)",
        )


def _check_node(target: Path) -> str:
    version = subprocess.run(
        [str(node_binary(target)), "--version"], capture_output=True, text=True, check=True
    ).stdout.strip()
    if not version.startswith(NODE_MAJOR):
        raise NpmError(f"npm installed node {version} in {target}, not {NODE_MAJOR}x")
    return version


def node_binary(folder: Path) -> Path:
    """The pinned ``node`` of an installed package set."""
    return folder / "node_modules" / ".bin" / "node"


def environ(folder: Path) -> dict[str, str]:
    """A process environment whose ``node`` and package binaries are the installed ones."""
    bin_dir = folder / "node_modules" / ".bin"
    return {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "NO_COLOR": "1",
        "CI": "true",  # no prompts, no browser
    }


__all__ = ["NpmError", "default_cache", "environ", "install", "node_binary"]
