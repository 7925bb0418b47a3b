"""Where the image build reads and writes (`Paths` under the checkout) and the helpers every step shares."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envreg.config import envreg_home
from envreg.resources import checkout_root, packaged_root


def repo_root() -> Path:
    """What images are built from: the envreg checkout in use (`envreg.resources.checkout_root`), else the
    catalog the installed wheel carries."""
    root = checkout_root() or packaged_root()
    if root is None:
        raise ImageBuildError(
            "no envreg checkout and no packaged catalog to build images from: run inside a clone of envreg, "
            "set ENVREG_ROOT to one, or install envreg from its wheel (it carries the catalog)"
        )
    return root


@dataclass(frozen=True)
class Paths:
    """The build's inputs under `root` (a checkout, or a wheel's catalog) and where it caches and stages.

    A checkout caches under its own `.cache/`; a wheel's catalog is read-only, so the cache is
    `$ENVREG_HOME/cache/build/` there."""

    root: Path
    checkout: bool = True

    @property
    def base_dir(self) -> Path:
        return self.root / "images" / "base"

    @property
    def base_lock(self) -> Path:
        return self.base_dir / "base.lock"

    @property
    def requirements_lock(self) -> Path:
        return self.base_dir / "requirements.lock"

    @property
    def bake_file(self) -> Path:
        return self.root / "docker-bake.hcl"

    @property
    def cache(self) -> Path:
        return self.root / ".cache" if self.checkout else envreg_home() / "cache" / "build"

    @property
    def wheelhouse(self) -> Path:
        return self.cache / "wheelhouse"

    @property
    def stage(self) -> Path:
        return self.cache / "bake"


def paths() -> Paths:
    root = repo_root()
    return Paths(root, checkout=root == checkout_root())


class ImageBuildError(RuntimeError):
    """Something a user must fix before images can be built; the message says what and how."""


def log(msg: str) -> None:
    print(f"envreg-images: {msg}", file=sys.stderr, flush=True)


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def run(cmd: list[str], **kw: Any) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, check=True, **kw)
