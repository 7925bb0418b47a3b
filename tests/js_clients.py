"""Real non-Python MCP clients for the tests, from npm: the conformance suite, the MCP Inspector CLI and
the TypeScript SDK (v1 and v2), with Node 22 itself from npm (`node@22`).

Every package is pinned in `tests/js/package.json` and, with its dependencies, in
`tests/js/package-lock.json`; `install()` runs `npm ci` once into `.cache/js-clients/<hash>/` (a fresh
folder whenever the pins change) and the tests run the pinned Node from there.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "tests" / "js"
NODE_MAJOR = "v22."


def install() -> Path:
    """The folder holding the installed clients (and the scripts of tests/js), installing them if needed."""
    pins = [(SOURCE / name).read_bytes() for name in ("package.json", "package-lock.json")]
    target = ROOT / ".cache" / "js-clients" / hashlib.sha256(b"\0".join(pins)).hexdigest()[:16]
    stamp = target / ".installed"
    if not stamp.exists():
        if shutil.which("npm") is None:
            raise RuntimeError("the JS client tests need npm (Debian: apt-get install -y npm)")
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target.parent / ".install.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not stamp.exists():
                shutil.rmtree(target, ignore_errors=True)
                target.mkdir()
                for name in ("package.json", "package-lock.json"):
                    shutil.copy(SOURCE / name, target / name)
                proc = subprocess.run(
                    ["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"],
                    cwd=target,
                    capture_output=True,
                    text=True,
                    timeout=1200,
                )
                if proc.returncode != 0:
                    raise RuntimeError(f"npm ci in {target} failed:\n{proc.stdout}\n{proc.stderr}")
                version = subprocess.run(
                    [str(target / "node_modules" / ".bin" / "node"), "--version"],
                    capture_output=True,
                    text=True,
                    check=True,
                ).stdout.strip()
                if not version.startswith(NODE_MAJOR):
                    raise RuntimeError(f"npm installed node {version}, not {NODE_MAJOR}x")
                stamp.write_text(version + "\n")
    for script in SOURCE.glob("*.mjs"):
        _place(script.read_bytes(), target / script.name)
    return target


def _place(data: bytes, path: Path) -> None:
    """Write `path` only when its bytes differ, by rename: a node process of another worker (or of the install
    that `scripts/test` starts in the background) may be reading it."""
    if path.exists() and path.read_bytes() == data:
        return
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    partial.write_bytes(data)
    os.replace(partial, path)


def env(folder: Path) -> dict[str, str]:
    """A process environment whose `node` and package binaries are the installed ones."""
    bin_dir = folder / "node_modules" / ".bin"
    return {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "NO_COLOR": "1",
        "CI": "true",  # no prompts, no browser
    }
