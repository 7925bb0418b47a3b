"""The local index: one SQLite record per environment version, over the Docker engine's image store.

`envreg build`, `pull` and `load` write it (`record_image`); the runtime resolves names through it
(`resolve`). It lives at `$ENVREG_HOME/index.sqlite`.

A record binds `name@version` to the image ID (the config digest: the same on every host, through push,
pull, save and load) and the manifest digest; when the image came from (or went to) a registry the record
also keeps the registry manifest digest (`repo_digest`, "host/repo@sha256:...") so it can be pulled again
by digest.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

from envreg.config import envreg_home
from envreg.manifest import Manifest
from envreg.registry.errors import NotFound, RegistryError
from envreg.registry.refs import EnvRef, is_digest, local_tag, short, version_key

Source = Literal["built", "pulled", "loaded"]
SOURCES = ("built", "pulled", "loaded")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS environments (
    name            TEXT NOT NULL,
    version         TEXT NOT NULL,
    manifest        TEXT NOT NULL,
    manifest_digest TEXT NOT NULL,
    image_id        TEXT NOT NULL,
    repo_digest     TEXT,
    local_ref       TEXT NOT NULL,
    source          TEXT NOT NULL,
    created         TEXT NOT NULL,
    PRIMARY KEY (name, version)
);
CREATE INDEX IF NOT EXISTS environments_image ON environments (image_id);
"""
_COLUMNS = (
    "name",
    "version",
    "manifest",
    "manifest_digest",
    "image_id",
    "repo_digest",
    "local_ref",
    "source",
    "created",
)


@dataclass(frozen=True)
class IndexRecord:
    """One environment version known to this host."""

    name: str
    version: str
    manifest: str = field(repr=False)  # the manifest JSON, as read from the image
    manifest_digest: str  # "sha256:...", = the image's io.envreg.manifest.digest label
    image_id: str  # "sha256:...", the image config digest (what the runtime runs)
    repo_digest: str | None  # "host[:port]/repo@sha256:..." (registry manifest digest) when known
    local_ref: str  # the engine tag: "envreg/calendar:1.0.0", or a pulled image's registry name
    source: str  # built | pulled | loaded
    created: str  # ISO 8601 UTC, when recorded

    @property
    def ref(self) -> str:
        return f"{self.name}:{self.version}"

    @property
    def image(self) -> str:
        """The engine reference to run: the image ID, never a movable tag."""
        return self.image_id

    def load_manifest(self) -> Manifest:
        return Manifest.loads(self.manifest)

    def to_json(self) -> dict:
        data = asdict(self)
        data["manifest"] = json.loads(self.manifest)
        return data


def _now() -> str:
    return dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


class LocalIndex:
    """The SQLite index under `$ENVREG_HOME` (or `path`)."""

    def __init__(self, path: Path | str | None = None) -> None:
        self.path = Path(path) if path else envreg_home() / "index.sqlite"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._db() as db:
            db.executescript(_SCHEMA)

    @contextmanager
    def _db(self) -> Iterator[sqlite3.Connection]:
        db = sqlite3.connect(self.path, timeout=30)
        try:
            with db:
                yield db
        finally:
            db.close()

    # ---------------------------------------------------------------------------------------------- writes

    def put(self, record: IndexRecord) -> IndexRecord:
        with self._db() as db:
            db.execute(
                f"INSERT OR REPLACE INTO environments ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' * len(_COLUMNS))})",
                [getattr(record, c) for c in _COLUMNS],
            )
        return record

    def record_image(
        self,
        image: str,
        source: Source,
        *,
        repo_digest: str | None = None,
        tag: bool = True,
        local_ref: str | None = None,
        verified: Manifest | None = None,
    ) -> IndexRecord:
        """Record an environment image the engine holds (by ID, tag or `repo@digest`).

        Reads the labels and `/env/manifest.json` from the image (unless the caller passes the manifest it
        `verified` already), verifies the manifest against its own digest and the
        `io.envreg.manifest.digest` label, tags the image `local_ref` (default `envreg/<name>:<version>`;
        not with `tag=False`) and writes the record (replacing the one for the same name and version).
        Raises `VerificationError` (nothing written) when the image is not a consistent environment image."""
        from envreg.registry import engine

        if source not in SOURCES:
            raise ValueError(f"source must be one of {SOURCES}, not {source!r}")
        info = engine.require_image(image)
        manifest = verified or engine.verified_manifest(info, image)
        ref = local_ref or local_tag(manifest.name, manifest.version)
        if tag and ref not in info.tags:
            engine.tag(info.id, ref)
        if repo_digest is None:
            old = self.get(manifest.name, manifest.version)
            if old and old.image_id == info.id:
                repo_digest = old.repo_digest
        record = IndexRecord(
            name=manifest.name,
            version=manifest.version,
            manifest=manifest.dumps(),
            manifest_digest=manifest.digest,
            image_id=info.id,
            repo_digest=repo_digest,
            local_ref=ref,
            source=source,
            created=_now(),
        )
        return self.put(record)

    def set_repo_digest(self, name: str, version: str, repo_digest: str) -> None:
        with self._db() as db:
            db.execute(
                "UPDATE environments SET repo_digest = ? WHERE name = ? AND version = ?",
                (repo_digest, name, version),
            )

    def remove(self, name: str, version: str | None = None) -> list[IndexRecord]:
        """Forget `name` (every version) or `name:version`; returns the records removed (the images stay)."""
        gone = [r for r in self.list(name) if version is None or r.version == version]
        with self._db() as db:
            for r in gone:
                db.execute("DELETE FROM environments WHERE name = ? AND version = ?", (r.name, r.version))
        return gone

    # ----------------------------------------------------------------------------------------------- reads

    def get(self, name: str, version: str) -> IndexRecord | None:
        with self._db() as db:
            row = db.execute(
                f"SELECT {', '.join(_COLUMNS)} FROM environments WHERE name = ? AND version = ?",
                (name, version),
            ).fetchone()
        return IndexRecord(*row) if row else None

    def list(self, name: str | None = None) -> list[IndexRecord]:
        """Every record (or those of one name), by name then newest version first."""
        with self._db() as db:
            if name is None:
                rows = db.execute(f"SELECT {', '.join(_COLUMNS)} FROM environments").fetchall()
            else:
                rows = db.execute(
                    f"SELECT {', '.join(_COLUMNS)} FROM environments WHERE name = ?", (name,)
                ).fetchall()
        records = [IndexRecord(*r) for r in rows]
        records.sort(key=lambda r: (version_key(r.version), r.created), reverse=True)
        records.sort(key=lambda r: r.name)
        return records

    def resolve(self, ref: str | EnvRef) -> IndexRecord:
        """`name` (newest version), `name:version`, or `name@sha256:<digest>` -> its record.

        The digest may be the image ID, the registry manifest digest or the manifest digest.
        Raises `NotFound` (a `LookupError`) naming what is known when nothing matches."""
        try:
            env = ref if isinstance(ref, EnvRef) else EnvRef.parse(ref)
        except ValueError as exc:
            raise NotFound(str(exc)) from None
        records = self.list(env.name)
        if not records:
            known = sorted({r.name for r in self.list()})
            raise NotFound(
                f"no environment named {env.name!r} in the local index"
                + (f" (known: {', '.join(known)})" if known else " (it is empty)"),
                f"build it (`envreg build {env.name}`), pull it (`envreg pull {env.name} --registry HOST`) "
                "or load an archive (`envreg load FILE`)",
            )
        matches = records
        if env.version:
            matches = [r for r in matches if r.version == env.version]
            if not matches:
                raise NotFound(
                    f"{env.name}:{env.version} is not in the local index "
                    f"(versions of {env.name}: {', '.join(r.version for r in records)})",
                    f"pull it: `envreg pull {env.name}:{env.version} --registry HOST`",
                )
        if env.digest:
            d = env.digest
            matches = [
                r
                for r in matches
                if d in (r.image_id, r.manifest_digest) or (r.repo_digest or "").endswith("@" + d)
            ]
            if not matches:
                have = ", ".join(f"{r.ref}@{r.image_id}" for r in records)
                raise NotFound(
                    f"no version of {env.name} has digest {d} in the local index (known: {have})",
                    f"pull it by digest: `envreg pull {env.name}@{d} --registry HOST`",
                )
        return matches[0]

    def by_image(self, image_id: str) -> list[IndexRecord]:
        return [r for r in self.list() if r.image_id == image_id]


# Module-level helpers over the default index (`$ENVREG_HOME/index.sqlite`).


def default_index() -> LocalIndex:
    return LocalIndex()


def record_image(
    image: str,
    source: Source,
    *,
    repo_digest: str | None = None,
    tag: bool = True,
    local_ref: str | None = None,
    verified: Manifest | None = None,
) -> IndexRecord:
    """Record an image (ID, tag or `repo@digest`) in the default index; see `LocalIndex.record_image`."""
    return default_index().record_image(
        image, source, repo_digest=repo_digest, tag=tag, local_ref=local_ref, verified=verified
    )


def resolve(ref: str | EnvRef) -> IndexRecord:
    """Resolve `name`, `name:version` or `name@sha256:...` in the default index; raises `LookupError`."""
    return default_index().resolve(ref)


def list_records(name: str | None = None) -> list[IndexRecord]:
    return default_index().list(name)


def remove(name: str, version: str | None = None) -> list[IndexRecord]:
    return default_index().remove(name, version)


def rm(ref: str, *, keep_image: bool = False, index: LocalIndex | None = None) -> list[IndexRecord]:
    """Forget `name` (every version) or `name:version` and untag its image (removed when nothing else names it)."""
    from envreg.registry import engine

    index = index or LocalIndex()
    env = EnvRef.parse(ref)
    if env.digest:
        targets = [index.resolve(env)]
    else:
        targets = [r for r in index.list(env.name) if env.version is None or r.version == env.version]
    if not targets:
        index.resolve(env)  # raises NotFound naming what is known
    for r in targets:
        index.remove(r.name, r.version)
        if keep_image:
            continue
        with contextlib.suppress(RegistryError):
            info = engine.image_info(r.image_id)
            if info is None:
                continue
            if r.local_ref in info.tags:
                engine.untag(r.local_ref)
            if r.repo_digest:
                registry_name = f"{r.repo_digest.split('@', 1)[0]}:{r.version}"  # what `pull` tags
                if registry_name in info.tags and registry_name != r.local_ref:
                    engine.untag(registry_name)
                if r.repo_digest in info.repo_digests:
                    engine.untag(r.repo_digest)
    return targets


def describe(record: IndexRecord) -> str:
    return f"{record.ref} image {short(record.image_id)} manifest {short(record.manifest_digest)} ({record.source})"


def check_digest(text: str) -> str:
    if not is_digest(text):
        raise RegistryError(f"{text!r} is not a digest", "digests look like sha256:<64 hex digits>")
    return text
