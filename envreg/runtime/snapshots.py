"""Content-addressed snapshots under ``$ENVREG_HOME/snapshots``: a state and the environment it belongs to.

A snapshot's id is the sha256 of what it holds: the environment (name and manifest digest) and the
sha256 of its canonical state. Reading one recomputes that address from the content and refuses a
file that does not match the id asked for, so an altered file never loads, even with its inner hash
updated. Equal states of two environments are two snapshots.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

from envreg.canonical import canonical_json, sha256_hex
from envreg.config import envreg_home
from envreg.errors import BadRequest, SnapshotCorrupt, SnapshotMismatch, SnapshotNotFound

_ID = re.compile(r"^(?:sha256:)?([0-9a-f]{4,64})$")


def snapshot_address(env: str, env_digest: str, state_sha256: str) -> str:
    """The content address of a snapshot: what environment, and which state."""
    return sha256_hex(canonical_json({"env": env, "env_digest": env_digest, "state_sha256": state_sha256}))


class Snapshot:
    """A state, the environment it belongs to, and its content address.

    The state itself is read when asked for (`canonical`, `state`): restoring a snapshot into a
    server that already keeps it sends only its hash.
    """

    __slots__ = ("_canonical", "_file", "_gzip", "_state", "address", "env", "env_digest", "sha256")

    def __init__(
        self,
        address: str,
        sha256: str,
        env: str,
        env_digest: str,
        state: dict[str, Any] | None = None,
        *,
        canonical: bytes | None = None,
        file: Path | None = None,
    ) -> None:
        self.address = address
        self.sha256 = sha256
        """sha256 of the canonical state (equal to a sandbox's `state_sha256()` when it holds that state)."""
        self.env = env
        self.env_digest = env_digest
        self._state = state
        self._canonical = canonical
        self._file = file
        self._gzip: bytes | None = None

    @property
    def id(self) -> str:
        return f"sha256:{self.address}"

    @property
    def canonical(self) -> bytes:
        """The canonical JSON of the state (UTF-8)."""
        if self._canonical is None:
            if self._state is not None:
                self._canonical = canonical_json(self._state).encode()
            else:
                self._canonical = _read_state(self._file, self.sha256)  # type: ignore[arg-type]
        return self._canonical

    @property
    def gzip(self) -> bytes:
        """The canonical JSON, gzip-compressed once, for every server it is sent to."""
        if self._gzip is None:
            self._gzip = gzip.compress(self.canonical, compresslevel=1, mtime=0)
        return self._gzip

    @property
    def state(self) -> dict[str, Any]:
        """The state as JSON data."""
        if self._state is None:
            self._state = json.loads(self.canonical)
        return self._state

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Snapshot) and other.address == self.address

    def __hash__(self) -> int:
        return hash(self.address)

    def __repr__(self) -> str:
        return f"<Snapshot {self.id[:19]} {self.env}>"

    def check_compatible(self, env: str, env_digest: str) -> None:
        if self.env_digest != env_digest:
            raise SnapshotMismatch(
                f"snapshot {self.id[:19]} was taken from {self.env} ({self.env_digest[:19]}), "
                f"not from {env} ({env_digest[:19]})",
                "restore it into a sandbox of the same environment",
            )


def _read_state(path: Path, sha: str) -> bytes:
    """The state part of a snapshot file, checked against its hash again (the file may have changed)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SnapshotCorrupt(f"snapshot file {path} is unreadable: {exc}") from None
    start = data.find(_STATE_KEY)
    text = data[start + len(_STATE_KEY) : -1] if start >= 0 and data.endswith(b"}") else b""
    if sha256_hex(text) != sha:
        raise SnapshotCorrupt(
            f"snapshot file {path} does not hold what its address names: it was altered or damaged",
            "take the snapshot again; never edit snapshot files",
        )
    return text


_STATE_KEY = b',"state":'


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

    def path(self, address: str) -> Path:
        return self.root / f"{address}.json"

    def put(self, env: str, env_digest: str, state: dict[str, Any], canonical: str | None = None) -> Snapshot:
        """Store `state` (its canonical text may be given when the caller already has it)."""
        text = (canonical_json(state) if canonical is None else canonical).encode()
        snap = self.put_canonical(env, env_digest, text)
        snap._state = json.loads(text)
        return snap

    def put_canonical(
        self, env: str, env_digest: str, canonical: bytes, sha256: str | None = None
    ) -> Snapshot:
        """Store a state given as its canonical JSON; `sha256`, when given, must be its hash."""
        state_sha = sha256_hex(canonical)
        if sha256 is not None and state_sha != sha256:
            raise SnapshotCorrupt(
                f"the state received for snapshot {sha256[:12]}... hashes to {state_sha[:12]}...",
                "the environment server sent something else than it named: take the snapshot again",
            )
        snap = Snapshot(
            snapshot_address(env, env_digest, state_sha), state_sha, env, env_digest, canonical=canonical
        )
        path = self.path(snap.address)
        if not path.exists():
            meta = canonical_json({"env": env, "env_digest": env_digest, "sha256": state_sha}).encode()
            fd, tmp = tempfile.mkstemp(dir=self.root, prefix=".tmp-")
            with os.fdopen(fd, "wb") as f:
                f.write(b'{"meta":' + meta + _STATE_KEY + canonical + b"}")
            os.replace(tmp, path)
        snap._file = path
        return snap

    def known(self, env: str, env_digest: str, sha256: str) -> Snapshot | None:
        """The stored snapshot of this environment and state, if there is one (read when its state is)."""
        address = snapshot_address(env, env_digest, sha256)
        path = self.path(address)
        return Snapshot(address, sha256, env, env_digest, file=path) if path.is_file() else None

    def get(self, ref: str) -> Snapshot:
        """The snapshot with this id or unique id prefix, verified against its address."""
        wanted = parse_snapshot_id(ref)
        matches = [self.path(wanted)] if len(wanted) == 64 else sorted(self.root.glob(f"{wanted}*.json"))
        if len(matches) > 1:
            raise BadRequest(
                f"snapshot id prefix {wanted!r} is ambiguous ({len(matches)} snapshots)", "give more digits"
            )
        if not matches or not matches[0].is_file():
            raise SnapshotNotFound(f"no snapshot {ref!r} in {self.root}")
        path = matches[0]
        fast = self._read_canonical(path)
        if fast is not None and fast.address.startswith(wanted):
            return fast
        try:
            data = json.loads(path.read_text())
            meta, state = data["meta"], data["state"]
            text = canonical_json(state).encode()
            state_sha = sha256_hex(text)
            address = snapshot_address(meta["env"], meta["env_digest"], state_sha)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise SnapshotCorrupt(f"snapshot file {path} is unreadable: {exc}") from None
        if address != path.stem or not address.startswith(wanted):
            raise SnapshotCorrupt(
                f"snapshot file {path} does not hold what its address names: it was altered or damaged",
                "take the snapshot again; never edit snapshot files",
            )
        return Snapshot(address, state_sha, meta["env"], meta["env_digest"], state, canonical=text, file=path)

    @staticmethod
    def _read_canonical(path: Path) -> Snapshot | None:
        """A file as this store writes it (meta, then the canonical state), checked by hashing its bytes."""
        try:
            data = path.read_bytes()
            cut = data.find(_STATE_KEY)
            if not data.startswith(b'{"meta":') or cut < 0 or not data.endswith(b"}"):
                return None
            meta = json.loads(data[8:cut])
            text = data[cut + len(_STATE_KEY) : -1]
            state_sha = sha256_hex(text)
            address = snapshot_address(meta["env"], meta["env_digest"], state_sha)
        except (OSError, ValueError, KeyError, TypeError):
            return None
        if address != path.stem:
            return None
        return Snapshot(address, state_sha, meta["env"], meta["env_digest"], canonical=text, file=path)
