"""Where the catalog's files are: the envreg checkout in use, or the copy a wheel carries.

The catalog is the environment folders (`images/<name>/`), the base image's files (`images/base/`), the
committed manifests (`manifests/`) and the bake file (`docker-bake.hcl`). In a checkout (an editable install,
`$ENVREG_ROOT`, or a working directory inside one) the checkout's folders are the catalog. A wheel carries a
copy under `envreg/_catalog/` (written by `setup.py` at build time, from `catalog_files`), used when no
checkout is found, so `pip install envreg` then `envreg catalog` works anywhere.

Only the standard library: `setup.py` imports this module to build the wheel.
"""

from __future__ import annotations

from pathlib import Path

from envreg.config import checkout_root as configured_root
from envreg.source import source_files

CATALOG_PACKAGE = "envreg._catalog"
"""The package a wheel holds the catalog in."""

_PACKAGE = Path(__file__).resolve().parent


def catalog_files(root: Path) -> dict[str, Path]:
    """The catalog of the checkout at `root`: relative POSIX path -> file, as a wheel carries it.

    Every environment folder's source (`envreg.source`, the files its image ships), every file of
    `images/base/` but caches, every manifest, and the bake file."""
    files: dict[str, Path] = {"docker-bake.hcl": root / "docker-bake.hcl"}
    for manifest in sorted((root / "manifests").glob("*.json")):
        files[f"manifests/{manifest.name}"] = manifest
    images = root / "images"
    folders = [env.parent for env in sorted(images.glob("*/env.py"))] + [images / "base"]
    for folder in folders:
        for relative, path in source_files(folder).items():
            files[f"images/{folder.name}/{relative}"] = path
    return files


def is_checkout(folder: Path) -> bool:
    """Whether `folder` is an envreg checkout (its bake file and pyproject.toml side by side)."""
    return (folder / "docker-bake.hcl").is_file() and (folder / "pyproject.toml").is_file()


def checkout_root() -> Path | None:
    """The envreg checkout in use: `$ENVREG_ROOT`, else the nearest folder at or above the working directory
    that is a checkout, else the folder above this package when it is one (an editable install); None for
    a wheel installed outside any checkout."""
    if (root := configured_root()) is not None:
        return root
    here = Path.cwd().resolve()
    for folder in (here, *here.parents):
        if is_checkout(folder):
            return folder
    return _PACKAGE.parent if is_checkout(_PACKAGE.parent) else None


def packaged_root() -> Path | None:
    """The catalog a wheel carries (`envreg/_catalog/`), when this install has one."""
    root = _PACKAGE / "_catalog"
    return root if (root / "docker-bake.hcl").is_file() else None


def catalog_root() -> Path | None:
    """The checkout's folder, else the wheel's catalog; None when there is neither."""
    return checkout_root() or packaged_root()


def default_images() -> Path:
    """Where environments are found by name without `$ENVREG_IMAGES`: `./images` when it exists (a checkout,
    or a user's own environment repository), else the catalog's `images/`."""
    local = Path("images")
    if local.is_dir():
        return local
    root = catalog_root()
    return root / "images" if root is not None else local


def default_manifests() -> Path:
    """The committed manifests without `$ENVREG_MANIFESTS`: `./manifests` when it exists, else the catalog's."""
    local = Path("manifests")
    if local.is_dir():
        return local
    root = catalog_root()
    return root / "manifests" if root is not None else local
