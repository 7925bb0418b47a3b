"""The folders through which the gateway reaches a sandbox container's agent plane on a Unix socket.

A container's server listens on its port (the bridge network) and, when the engine runs on this machine,
also on ``agent.sock`` in a folder of this host that is bind-mounted into that container alone
(`AGENT_SOCKET_DIR`): a round trip on it skips the bridge (`bench/bench_transport.py`). The folder has to be
the container's for the socket to be bound (it runs as another user), so nothing in it is trusted until it
is **sealed**: once the server answers, the folder loses every write permission (only its owner, this
runtime's user, could give them back), whatever else the container made in it is removed, and only then is
``agent.sock`` checked to be a socket, not a link (``connect(2)`` would follow one anywhere on the host) nor
anything else. A folder that does not pass leaves its sandbox on the port.

The folders live on ``/dev/shm``: what a container writes there is memory charged to its own cgroup, and it
goes when the folder is sealed or the container removed (or, after a crash, by `envreg gc`). Only a runtime
running as root uses them: a container can make folders there before the seal that no other user could empty.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import stat
from collections.abc import Callable
from pathlib import Path

logger = logging.getLogger("envreg.runtime")

SHARED_MEMORY = Path("/dev/shm")
SOCKET_NAME = "agent.sock"


def socket_root(base: Path = SHARED_MEMORY) -> Path | None:
    """The folder of runtimes' socket folders (``/dev/shm/envreg-0``, mode 0700), or None when it cannot be
    had safely: not root, no ``/dev/shm``, or a folder there by that name that another user made or can
    enter (anyone may create names in ``/dev/shm``)."""
    if os.geteuid() != 0 or not base.is_dir():
        return None
    root = base / f"envreg-{os.getuid()}"
    try:
        with contextlib.suppress(FileExistsError):
            root.mkdir(mode=0o700)
        info = os.lstat(root)
    except OSError as exc:
        logger.warning("%s: sandboxes are reached on their ports", exc)
        return None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        logger.warning(
            "%s is not a folder only this user can enter: sandboxes are reached on their ports", root
        )
        return None
    return root


class SocketFolders:
    """One runtime's socket folders: ``<root>/<runtime id>/<lease>``, one per container."""

    def __init__(self, root: Path, runtime_id: str) -> None:
        self.folder = root / runtime_id

    def make(self, lease: str) -> Path:
        """An empty folder the container (another user) can bind its socket in."""
        self.folder.mkdir(mode=0o700, exist_ok=True)
        folder = self.folder / lease
        folder.mkdir()
        folder.chmod(0o777)  # mkdir's mode is cut by the umask
        return folder

    def path(self, lease: str) -> Path:
        return self.folder / lease

    def remove(self, lease: str) -> None:
        remove(self.folder / lease)

    def close(self) -> None:
        remove(self.folder)


def seal(folder: Path) -> str | None:
    """Take every write permission from `folder` and remove all in it but ``agent.sock`` (what the container
    made there would otherwise outlive its sandbox in a recycled container); then return the socket's path
    if it is a Unix socket (neither a link nor anything else), else None. Once sealed, nothing in it can
    change."""
    try:
        folder.chmod(0o555)
        for entry in os.scandir(folder):
            if entry.name != SOCKET_NAME:
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path)
                else:
                    os.unlink(entry.path)
        info = os.lstat(folder / SOCKET_NAME)
    except OSError:
        return None
    return str(folder / SOCKET_NAME) if stat.S_ISSOCK(info.st_mode) else None


def remove(folder: Path) -> None:
    """Remove a socket folder and all in it, sealed or not (as root: whoever made what is in it)."""
    if folder.is_dir() and not folder.is_symlink():
        shutil.rmtree(folder, ignore_errors=True)


def collect(root: Path | None, owned: Callable[[str, float], bool], dry_run: bool = False) -> list[str]:
    """Remove the runtimes' socket folders under `root` that `owned(runtime id, created)` says nobody owns
    any more; returns their paths."""
    removed: list[str] = []
    if root is None:
        return removed
    for folder in sorted(root.iterdir()):
        if folder.is_dir() and not folder.is_symlink() and not owned(folder.name, folder.stat().st_mtime):
            if not dry_run:
                remove(folder)
            removed.append(str(folder))
    return removed


__all__ = ["SOCKET_NAME", "SocketFolders", "collect", "remove", "seal", "socket_root"]
