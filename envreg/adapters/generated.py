"""Generated environment folders (images/bfcl-*/, images/tau2-*/): written, or compared with what is there."""

from __future__ import annotations

from pathlib import Path


def sync_folder(folder: Path, wanted: dict[str, str], check: bool = False) -> list[str]:
    """Make `folder` hold exactly `wanted` (relative path -> text), or with `check` only compare; returns the
    paths that differed (files written, stale or removed)."""
    changed = []
    present = (
        {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()} if folder.is_dir() else set()
    )
    for rel in sorted(present - set(wanted)):
        if "__pycache__" in rel:
            continue
        changed.append(str(folder / rel))
        if not check:
            (folder / rel).unlink()
    for rel, text in wanted.items():
        path = folder / rel
        if not path.is_file() or path.read_text() != text:
            changed.append(str(path))
            if not check:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text)
    return changed
