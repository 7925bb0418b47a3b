"""An environment's source as shipped: which files of its folder go into the image, and their digests.

One definition for the three places that need it: the manifest (`source_files`, `digests.source`),
the image build (`envreg build` stages exactly these files as ``/env``) and verification (the files
read back out of an image's ``/env`` must be these, byte for byte). Every regular file under the
folder counts, by its POSIX path relative to the folder, except bytecode caches and the image's own
``manifest.json`` (which carries the digest, so it cannot be covered by it).

Only the standard library: `envreg.images` imports this under any python3.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from pathlib import Path, PurePosixPath

from envreg.canonical import digest

MANIFEST_FILE = "manifest.json"
SKIPPED_DIRS = frozenset({"__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"})


def is_source(relative: str) -> bool:
    """Whether a path relative to the environment folder is part of its source."""
    path = PurePosixPath(relative)
    if not path.parts or path.is_absolute() or ".." in path.parts:
        return False
    if relative == MANIFEST_FILE or path.suffix == ".pyc":
        return False
    return not any(part in SKIPPED_DIRS for part in path.parts)


def source_files(folder: Path) -> dict[str, Path]:
    """The environment's source files: relative POSIX path -> file, sorted by path."""
    found = {}
    for f in folder.rglob("*"):
        rel = f.relative_to(folder).as_posix()
        if f.is_file() and is_source(rel):
            found[rel] = f
    return dict(sorted(found.items()))


def file_sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def source_hashes(folder: Path) -> dict[str, str]:
    """Relative path -> hex sha256 of the content, for every source file of `folder`."""
    return {rel: file_sha256(f.read_bytes()) for rel, f in source_files(folder).items()}


def source_digest(hashes: Mapping[str, str]) -> str:
    """``sha256:<hex>`` over the sorted paths and the contents' hashes (canonical JSON of the mapping)."""
    return digest(dict(hashes))


def source_differences(expected: Mapping[str, str], actual: Mapping[str, str]) -> list[str]:
    """What differs between two path -> sha256 mappings, one line per file, sorted by path."""
    lines = []
    for rel in sorted(set(expected) | set(actual)):
        want, have = expected.get(rel), actual.get(rel)
        if want == have:
            continue
        if have is None:
            lines.append(f"{rel} is missing")
        elif want is None:
            lines.append(f"{rel} was added")
        else:
            lines.append(f"{rel} was changed (sha256 {have[:12]}, expected {want[:12]})")
    return lines


def summarize(lines: Iterable[str], limit: int = 5) -> str:
    lines = list(lines)
    shown = "; ".join(lines[:limit])
    return shown + (f"; and {len(lines) - limit} more" if len(lines) > limit else "")
