"""Content-addressed snapshots: canonical state JSON stored by its sha256 under ``$ENVREG_HOME/snapshots``."""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envreg.canonical import canonical_json, sha256_hex
from envreg.home import envreg_home


class SnapshotMismatch(ValueError):
    """A snapshot was offered to an environment it was not taken from."""


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A state, the environment it belongs to, and its content address."""

    sha256: str
    env: str
    env_digest: str
    state: dict[str, Any]

    @property
    def id(self) -> str:
        return f"sha256:{self.sha256}"

    def check_compatible(self, env: str, env_digest: str) -> None:
        if self.env_digest != env_digest:
            raise SnapshotMismatch(
                f"snapshot {self.id[:19]} was taken from {self.env} ({self.env_digest[:19]}), "
                f"not from {env} ({env_digest[:19]}): restore it into a sandbox of the same environment"
            )


class SnapshotStore:
    """Snapshots on disk, one file per (environment, state) content address."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = root or envreg_home() / "snapshots"
        self.root.mkdir(parents=True, exist_ok=True)

    def put(self, env: str, env_digest: str, state: dict[str, Any]) -> Snapshot:
        canonical = canonical_json(state)
        snap = Snapshot(sha256_hex(canonical), env, env_digest, json.loads(canonical))
        path = self._path(snap.sha256)
        if not path.exists():
            record = canonical_json({"env": env, "env_digest": env_digest, "sha256": snap.sha256})
            fd, tmp = tempfile.mkstemp(dir=self.root, prefix=".tmp-")
            with os.fdopen(fd, "w") as f:
                f.write('{"meta":' + record + ',"state":' + canonical + "}")
            os.replace(tmp, path)
        return snap

    def get(self, ref: str) -> Snapshot:
        sha = ref.removeprefix("sha256:")
        matches = [self._path(sha)] if len(sha) == 64 else sorted(self.root.glob(f"{sha}*.json"))
        if len(matches) != 1 or not matches[0].is_file():
            raise KeyError(
                f"no snapshot {ref!r} in {self.root}" + (" (ambiguous prefix)" if len(matches) > 1 else "")
            )
        data = json.loads(matches[0].read_text())
        snap = Snapshot(
            data["meta"]["sha256"], data["meta"]["env"], data["meta"]["env_digest"], data["state"]
        )
        if sha256_hex(canonical_json(snap.state)) != snap.sha256:
            raise ValueError(f"snapshot file {matches[0]} is corrupt: its content does not match its address")
        return snap

    def _path(self, sha: str) -> Path:
        return self.root / f"{sha}.json"
