"""Content-addressed snapshots under ``$ENVREG_HOME/snapshots``: a state and the environment it belongs to.

A snapshot's id is the sha256 of what it holds: the environment (name and manifest digest) and the
sha256 of its canonical state. Reading one recomputes that address from the content and refuses a
file that does not match the id asked for, so an altered file never loads, even with its inner hash
updated. Equal states of two environments are two snapshots.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envreg.canonical import canonical_json, sha256_hex
from envreg.config import envreg_home
from envreg.errors import BadRequest, SnapshotCorrupt, SnapshotMismatch, SnapshotNotFound

_ID = re.compile(r"^(?:sha256:)?([0-9a-f]{4,64})$")


def snapshot_address(env: str, env_digest: str, state_sha256: str) -> str:
    """The content address of a snapshot: what environment, and which state."""
    return sha256_hex(canonical_json({"env": env, "env_digest": env_digest, "state_sha256": state_sha256}))


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A state, the environment it belongs to, and its content address."""

    address: str
    sha256: str
    """sha256 of the canonical state (equal to a sandbox's `state_sha256()` when it holds that state)."""
    env: str
    env_digest: str
    state: dict[str, Any]

    @property
    def id(self) -> str:
        return f"sha256:{self.address}"

    def check_compatible(self, env: str, env_digest: str) -> None:
        if self.env_digest != env_digest:
            raise SnapshotMismatch(
                f"snapshot {self.id[:19]} was taken from {self.env} ({self.env_digest[:19]}), "
                f"not from {env} ({env_digest[:19]})",
                "restore it into a sandbox of the same environment",
            )


def parse_snapshot_id(ref: str) -> str:
    """The hex part of ``sha256:<hex>`` or ``<hex>`` (4 to 64 lowercase hex digits), else `BadRequest`."""
    match = _ID.match(ref) if isinstance(ref, str) else None
    if match is None:
        shown = ref if len(str(ref)) <= 80 else f"{str(ref)[:77]}..."
        raise BadRequest(
            f"{shown!r} is not a snapshot id",
            "a snapshot id is sha256:<64 hex digits>, or a unique prefix of it",
        )
    return match.group(1)


class SnapshotStore:
    """Snapshots on disk, one file per content address."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = root or envreg_home() / "snapshots"
        self.root.mkdir(parents=True, exist_ok=True)

    def put(self, env: str, env_digest: str, state: dict[str, Any], canonical: str | None = None) -> Snapshot:
        """Store `state` (its canonical text may be given when the caller already has it)."""
        canonical = canonical_json(state) if canonical is None else canonical
        state_sha = sha256_hex(canonical)
        snap = Snapshot(
            snapshot_address(env, env_digest, state_sha), state_sha, env, env_digest, json.loads(canonical)
        )
        path = self.root / f"{snap.address}.json"
        if not path.exists():
            meta = canonical_json({"env": env, "env_digest": env_digest, "sha256": state_sha})
            fd, tmp = tempfile.mkstemp(dir=self.root, prefix=".tmp-")
            with os.fdopen(fd, "w") as f:
                f.write('{"meta":' + meta + ',"state":' + canonical + "}")
            os.replace(tmp, path)
        return snap

    def get(self, ref: str) -> Snapshot:
        """The snapshot with this id or unique id prefix, verified against its address."""
        wanted = parse_snapshot_id(ref)
        matches = (
            [self.root / f"{wanted}.json"] if len(wanted) == 64 else sorted(self.root.glob(f"{wanted}*.json"))
        )
        if len(matches) > 1:
            raise BadRequest(
                f"snapshot id prefix {wanted!r} is ambiguous ({len(matches)} snapshots)", "give more digits"
            )
        if not matches or not matches[0].is_file():
            raise SnapshotNotFound(f"no snapshot {ref!r} in {self.root}")
        path = matches[0]
        try:
            data = json.loads(path.read_text())
            meta, state = data["meta"], data["state"]
            state_sha = sha256_hex(canonical_json(state))
            address = snapshot_address(meta["env"], meta["env_digest"], state_sha)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise SnapshotCorrupt(f"snapshot file {path} is unreadable: {exc}") from None
        if address != path.stem or not address.startswith(wanted):
            raise SnapshotCorrupt(
                f"snapshot file {path} does not hold what its address names: it was altered or damaged",
                "take the snapshot again; never edit snapshot files",
            )
        return Snapshot(address, state_sha, meta["env"], meta["env_digest"], state)
