"""Where the image build reads and writes (`Paths` under the checkout) and the helpers every step shares."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envreg.config import checkout_root


def repo_root() -> Path:
    """The envreg checkout: `$ENVREG_ROOT`, else the nearest folder above cwd holding docker-bake.hcl, else
    the folder above the installed package."""
    if (root := checkout_root()) is not None:
        return root
    here = Path.cwd().resolve()
    for p in (here, *here.parents):
        if (p / "docker-bake.hcl").is_file() and (p / "pyproject.toml").is_file():
            return p
    return Path(__file__).resolve().parent.parent.parent


@dataclass(frozen=True)
class Paths:
    root: Path

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
        return self.root / ".cache"

    @property
    def wheelhouse(self) -> Path:
        return self.cache / "wheelhouse"

    @property
    def stage(self) -> Path:
        return self.cache / "bake"


def paths() -> Paths:
    return Paths(repo_root())


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
