"""Offline archives for air-gapped hosts: `save` environments (images, manifests, lock) into one tar file,
`verify_archive` it end to end, `load` it back (verified before anything is recorded).

`save` and `load` take an optional `progress` callback that receives `{"status": ..., "current": n,
"total": m}` byte counts; the CLI renders them with rich.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import tarfile
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from envreg.manifest import Manifest
from envreg.registry import engine
from envreg.registry.engine import Progress
from envreg.registry.errors import RegistryError, VerificationError
from envreg.registry.index import IndexRecord, LocalIndex
from envreg.registry.lockfile import LockEntry, Lockfile, check_expected
from envreg.registry.refs import local_tag

ARCHIVE_INDEX = "envreg-archive.json"
ARCHIVE_FORMAT = "envreg-archive"
ARCHIVE_VERSION = 1
IMAGES_MEMBER = "images.tar"
LOCK_MEMBER = "envreg.lock"


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return "sha256:" + h.hexdigest()


def save(
    names: Iterable[str],
    out: Path | str,
    *,
    index: LocalIndex | None = None,
    progress: Progress | None = None,
) -> Lockfile:
    """Write environments (images, manifests, lock) into one tar archive for air-gapped hosts.

    Layout: `envreg-archive.json` (format, sha256 and size of every other member), `envreg.lock`,
    `manifests/<name>-<version>.json`, `images.tar` (`docker save` of the pinned image IDs)."""
    index = index or LocalIndex()
    records: list[IndexRecord] = []
    for n in names:
        rec = index.resolve(n)
        if any(r.image_id == rec.image_id and r.ref == rec.ref for r in records):
            continue
        engine.recorded_image(rec)
        records.append(rec)
    if not records:
        raise RegistryError("nothing to save", "name at least one environment: `envreg save NAME... -o FILE`")
    lockfile = Lockfile(
        [
            LockEntry(
                r.name,
                r.version,
                r.image_id,
                r.manifest_digest,
                *((r.repo_digest.split("@", 1)) if r.repo_digest else (None, None)),
            )
            for r in records
        ]
    )
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".envreg-save-", dir=out.parent) as tmp:
        stage = Path(tmp)
        images = stage / IMAGES_MEMBER
        c = engine.client()
        ids = sorted({r.image_id for r in records})
        resp = c.api._get(c.api._url("/images/get"), params={"names": ids}, stream=True)
        c.api._raise_for_status(resp)
        written = 0
        with images.open("wb") as f:
            for chunk in resp.iter_content(1 << 20):
                f.write(chunk)
                written += len(chunk)
                if progress:
                    progress({"status": "exporting images", "current": written, "total": None})
        files: dict[str, Path] = {LOCK_MEMBER: stage / LOCK_MEMBER}
        lockfile.write(files[LOCK_MEMBER])
        for r in records:
            p = stage / f"{r.name}-{r.version}.json"
            p.write_text(r.load_manifest().dumps())
            files[f"manifests/{r.name}-{r.version}.json"] = p
        files[IMAGES_MEMBER] = images
        meta = {
            "format": ARCHIVE_FORMAT,
            "version": ARCHIVE_VERSION,
            "environments": [e.ref for e in lockfile.environments],
            "files": {k: {"sha256": _sha256_file(p), "size": p.stat().st_size} for k, p in files.items()},
        }
        meta_path = stage / ARCHIVE_INDEX
        meta_path.write_text(json.dumps(meta, indent=2) + "\n")
        partial = out.with_name(out.name + ".partial")
        with tarfile.open(partial, "w", format=tarfile.PAX_FORMAT) as tar:
            for arcname, p in [(ARCHIVE_INDEX, meta_path), *files.items()]:
                ti = tar.gettarinfo(str(p), arcname)
                ti.uid = ti.gid = 0
                ti.uname = ti.gname = ""
                ti.mtime = 0
                with p.open("rb") as f:
                    tar.addfile(ti, f)
                if progress:
                    progress(
                        {"status": "writing archive", "current": ti.size, "total": ti.size, "id": arcname}
                    )
        partial.replace(out)
    return lockfile


class _Hashing:
    """A read-only file wrapper that hashes (and counts) what passes through it."""

    def __init__(self, f: Any, progress: Progress | None, total: int) -> None:
        self.f, self.h, self.n, self.progress, self.total = f, hashlib.sha256(), 0, progress, total

    def read(self, size: int = -1) -> bytes:
        data = self.f.read(size)
        self.h.update(data)
        self.n += len(data)
        if self.progress and data:
            self.progress({"status": "loading images", "current": self.n, "total": self.total})
        return data

    def __iter__(self):
        while chunk := self.read(1 << 20):
            yield chunk


def _bad_archive(path: Path, why: str) -> VerificationError:
    return VerificationError(
        f"{path} is not a usable envreg archive: {why}; nothing was loaded",
        "copy the archive again (it may be truncated or altered), or recreate it with `envreg save NAMES -o FILE`",
    )


def verify_archive(path: Path | str, progress: Progress | None = None) -> tuple[dict[str, Any], Lockfile]:
    """Check an archive end to end (every member's size and sha256) without loading anything."""
    path = Path(path)
    if not path.is_file():
        raise RegistryError(f"no archive at {path}")
    try:
        with tarfile.open(path, "r:") as tar:
            first = tar.next()
            if first is None or first.name != ARCHIVE_INDEX:
                raise _bad_archive(path, f"it does not start with {ARCHIVE_INDEX}")
            f = tar.extractfile(first)
            assert f is not None
            meta = json.loads(f.read())
            if meta.get("format") != ARCHIVE_FORMAT or meta.get("version") != ARCHIVE_VERSION:
                raise _bad_archive(path, f"unknown format {meta.get('format')!r} {meta.get('version')!r}")
            expected: dict[str, dict] = meta["files"]
            seen: set[str] = set()
            lock_text = None
            for m in tar:
                if m is first:
                    continue
                if m.name not in expected:
                    raise _bad_archive(path, f"unexpected member {m.name}")
                if m.name in seen:
                    raise _bad_archive(path, f"duplicate member {m.name}")
                fm = tar.extractfile(m)
                if fm is None:
                    raise _bad_archive(path, f"{m.name} is not a file")
                h, n = hashlib.sha256(), 0
                keep = m.name == LOCK_MEMBER
                buf = bytearray()
                while chunk := fm.read(1 << 20):
                    h.update(chunk)
                    n += len(chunk)
                    if keep:
                        buf += chunk
                    if progress:
                        progress({"status": "verifying archive", "current": n, "total": m.size, "id": m.name})
                if n != expected[m.name]["size"] or "sha256:" + h.hexdigest() != expected[m.name]["sha256"]:
                    raise _bad_archive(path, f"{m.name} does not match its recorded sha256 (altered)")
                if keep:
                    lock_text = bytes(buf).decode()
                seen.add(m.name)
            missing = set(expected) - seen
            if missing:
                raise _bad_archive(path, f"missing {', '.join(sorted(missing))} (truncated)")
    except (tarfile.TarError, EOFError, OSError, ValueError, KeyError) as exc:
        if isinstance(exc, VerificationError):
            raise
        raise _bad_archive(path, f"truncated or corrupt ({exc.__class__.__name__}: {exc})") from None
    assert lock_text is not None
    return meta, Lockfile.loads(lock_text, f"{path}:{LOCK_MEMBER}")


def loaded_name(entry: LockEntry, manifest: Manifest, tag: bool) -> str:
    """The name a loaded image gets: `envreg/<name>:<version>` with `tag`, else its registry's name
    (`<repo>:<version>` from the lock's `repo@digest`), else its ID (no tag at all)."""
    if tag:
        return local_tag(manifest.name, manifest.version)
    if entry.pull_ref and "@" in entry.pull_ref:
        return f"{entry.pull_ref.split('@', 1)[0]}:{manifest.version}"
    return entry.image_id


def load(
    path: Path | str,
    *,
    index: LocalIndex | None = None,
    progress: Progress | None = None,
    tag: bool = False,
) -> list[IndexRecord]:
    """Load an archive written by `save`: verify every member first, load the images into the engine,
    check each against the archive's lock (image ID, manifest digest) and record them ("loaded").
    On any mismatch nothing is recorded and images that were not there before are removed.

    As `pull` does, a loaded image keeps its registry's name (`<repo>:<version>`, from the lock's registry
    digest) or none (the index runs it by ID); `envreg/<name>:<version>`, which other users of the engine
    may run, is tagged only with `tag=True`."""
    index = index or LocalIndex()
    path = Path(path)
    meta, lockfile = verify_archive(path, progress)
    before = {e.image_id for e in lockfile.environments if engine.image_info(e.image_id)}
    c = engine.client()
    try:
        with tarfile.open(path, "r:") as tar:
            member = tar.getmember(IMAGES_MEMBER)
            f = tar.extractfile(member)
            assert f is not None
            stream = _Hashing(f, progress, member.size)
            out = c.api.load_image(stream, quiet=True)
            for ev in out or []:
                if isinstance(ev, dict) and ("error" in ev or "errorDetail" in ev):
                    raise _bad_archive(
                        path, f"the engine refused its images: {ev.get('error') or ev['errorDetail']}"
                    )
            if "sha256:" + stream.h.hexdigest() != meta["files"][IMAGES_MEMBER]["sha256"]:
                raise _bad_archive(path, f"{IMAGES_MEMBER} changed while it was loaded")
        checked: list[tuple[LockEntry, str, Manifest]] = []
        for e in lockfile.environments:
            info = engine.image_info(e.image_id)
            if info is None:
                raise _bad_archive(path, f"{e.ref}: image {e.image_id} is not in {IMAGES_MEMBER}")
            m = engine.verify_image_source(c, info.id, f"{path}:{e.ref}")
            check_expected(e, m.name, m.version, info.id, m.digest, f"{path}:{e.ref}")
            checked.append((e, info.id, m))
        records = []
        for e, image_id, m in checked:
            name = loaded_name(e, m, tag)
            if name != image_id:
                engine.tag(image_id, name)
            records.append(
                index.record_image(
                    image_id, "loaded", repo_digest=e.pull_ref, tag=False, local_ref=name, verified=m
                )
            )
    except BaseException:
        for e in lockfile.environments:
            if e.image_id not in before:
                with contextlib.suppress(Exception):
                    engine.remove_image(e.image_id)
        raise
    return records
