"""Registry operations: push, pull (verified, by digest), search, lock, save and load.

Each takes an optional `progress` callback that receives the engine's JSON progress events (push, pull) or
`{"status": ..., "current": n, "total": m}` byte counts (save, load); the CLI renders them with rich.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tarfile
import tempfile
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envreg.manifest import Manifest
from envreg.registry import engine
from envreg.registry.client import Credentials, RegistryClient, RemoteImage
from envreg.registry.engine import LABEL_MANIFEST, LABEL_NAME, LABEL_TOOLS, LABEL_VERSION
from envreg.registry.errors import NotFound, RegistryError, VerificationError
from envreg.registry.index import IndexRecord, LocalIndex
from envreg.registry.lockfile import LockEntry, Lockfile
from envreg.registry.refs import (
    DEFAULT_NAMESPACE,
    EnvRef,
    RemoteRef,
    local_tag,
    normalize_registry,
    parse_remote,
    remote_for,
    short,
    version_key,
)

Progress = Callable[[dict[str, Any]], None]


def default_registry(registry: str | None) -> str | None:
    return registry or os.environ.get("ENVREG_REGISTRY") or None


def _client(registry: str, credentials: Credentials | bool | None = True) -> RegistryClient:
    return RegistryClient(registry, credentials)


def _engine_auth(rc: RegistryClient) -> dict | None:
    return rc.credentials.engine_auth() if rc.credentials else None


# ------------------------------------------------------------------------------------------------------ push


@dataclass
class PushResult:
    record: IndexRecord
    repository: str
    tag: str
    digest: str  # registry manifest digest

    @property
    def pinned(self) -> str:
        return f"{self.repository}@{self.digest}"


def push(
    ref: str,
    registry: str,
    *,
    namespace: str = DEFAULT_NAMESPACE,
    force: bool = False,
    index: LocalIndex | None = None,
    credentials: Credentials | bool | None = True,
    progress: Progress | None = None,
) -> PushResult:
    """Push an environment from the local index to `registry` as `<registry>/<namespace>/<name>:<version>`.

    Refuses to move an existing remote tag to another image unless `force`."""
    index = index or LocalIndex()
    record = index.resolve(ref)
    info = engine.image_info(record.image_id)
    if info is None:
        raise NotFound(
            f"{record.ref} is in the index but the engine no longer has its image {short(record.image_id)}",
            f"rebuild or pull it again, or forget it: `envreg rm {record.ref}`",
        )
    manifest = engine.verified_manifest(info, record.ref)
    if manifest.digest != record.manifest_digest:
        raise VerificationError(
            f"{record.ref}: the image's manifest {manifest.digest} is not the recorded {record.manifest_digest}"
        )
    remote = remote_for(EnvRef(record.name, record.version), registry, namespace)
    with _client(remote.registry, credentials) as rc:
        existing = rc.manifest_digest(remote.repository, record.version)
        if existing and not force:
            _, doc = rc.image_manifest(remote.repository, existing)
            if doc["config"]["digest"] != record.image_id:
                raise RegistryError(
                    f"{remote.repo}:{record.version} already exists and is another image "
                    f"({short(doc['config']['digest'])}, not {short(record.image_id)}): a version is immutable",
                    "bump the environment's version, or pass --force to move the tag",
                )
        target = f"{remote.repo}:{record.version}"
        engine.tag(record.image_id, target)
        try:
            digest = engine.push(remote.repo, record.version, _engine_auth(rc), progress)
        finally:
            engine.untag(target)
        _, doc = rc.image_manifest(remote.repository, digest)
        if doc["config"]["digest"] != record.image_id:
            raise VerificationError(
                f"{remote.repo}@{digest}: the registry holds config {doc['config']['digest']}, "
                f"not the pushed image {record.image_id}"
            )
    pinned = f"{remote.repo}@{digest}"
    index.set_repo_digest(record.name, record.version, pinned)
    return PushResult(index.get(record.name, record.version) or record, remote.repo, record.version, digest)


# ------------------------------------------------------------------------------------------------------ pull


@dataclass
class PullResult:
    record: IndexRecord
    transferred: bool  # False when the image was already in the engine (nothing moved)
    remote: RemoteRef


def _target(
    ref: str, registry: str | None, namespace: str, index: LocalIndex
) -> tuple[RemoteRef, str | None]:
    """Where to pull from, and the environment name asked for (None for a fully qualified reference)."""
    qualified = parse_remote(ref)
    if qualified:
        return qualified, None
    env = EnvRef.parse(ref)
    registry = default_registry(registry)
    if registry:
        return remote_for(env, registry, namespace), env.name
    # No registry given: pull again from where the recorded version came from.
    with contextlib.suppress(LookupError):
        rec = index.resolve(env)
        if rec.repo_digest:
            remote = parse_remote(rec.repo_digest)
            assert remote is not None
            return RemoteRef(remote.registry, remote.repository, rec.version, remote.digest), env.name
    raise RegistryError(
        f"no registry to pull {ref} from",
        "pass --registry HOST[:PORT] (or set ENVREG_REGISTRY), or give a full reference HOST/REPO:TAG",
    )


def _newest_tag(rc: RegistryClient, repository: str) -> str:
    tags = rc.tags(repository)
    versions = [t for t in tags if t[:1].isdigit()]
    if versions:
        return max(versions, key=version_key)
    if "latest" in tags:
        return "latest"
    raise NotFound(
        f"{rc.registry} has no environment at {repository} (no tags)",
        f"look for it with `envreg search TEXT --registry {rc.registry}`, or push it: `envreg push NAME`",
    )


def _find_by_digest(rc: RegistryClient, repository: str, digest: str) -> tuple[str, dict[str, Any]]:
    """A registry manifest digest, or an image ID / manifest digest found among the repository's tags."""
    with contextlib.suppress(NotFound):
        return rc.image_manifest(repository, digest)
    for t in rc.tags(repository):
        mdigest, doc = rc.image_manifest(repository, t)
        if doc["config"]["digest"] == digest:
            return mdigest, doc
        labels = rc.config_labels(repository, doc["config"]["digest"])
        if labels.get(LABEL_MANIFEST) == digest:
            return mdigest, doc
    raise NotFound(f"{rc.registry}/{repository} has no image with digest {digest}")


def pull(
    ref: str,
    registry: str | None = None,
    *,
    namespace: str = DEFAULT_NAMESPACE,
    expect: LockEntry | None = None,
    replace: bool = False,
    index: LocalIndex | None = None,
    credentials: Credentials | bool | None = True,
    progress: Progress | None = None,
) -> PullResult:
    """Pull an environment by digest and record it, or refuse (nothing recorded, what was pulled removed).

    `ref`: `name`, `name:version`, `name@sha256:...` (registry manifest digest, image ID or manifest digest)
    or a full `host/repo[:tag][@digest]`. The registry's manifest is resolved first; the engine then pulls
    exactly that manifest digest. Checked: the labels name and version what was asked for, the digest asked
    for (and `expect`, a lock entry) matches, the pulled image ID is the config digest the registry declares,
    the manifest in the image matches its label, and a version already recorded here is not silently
    replaced by another image (`replace=True` allows it)."""
    index = index or LocalIndex()
    remote, want_name = _target(ref, registry, namespace, index)
    with _client(remote.registry, credentials) as rc:
        if remote.digest:
            mdigest, doc = _find_by_digest(rc, remote.repository, remote.digest)
        else:
            tag_ = remote.tag or _newest_tag(rc, remote.repository)
            remote = RemoteRef(remote.registry, remote.repository, tag_)
            mdigest, doc = rc.image_manifest(remote.repository, tag_)
        config_digest = doc["config"]["digest"]
        pinned = RemoteRef(remote.registry, remote.repository, remote.tag, mdigest)
        before = engine.image_info(config_digest)
        labels = before.labels if before else rc.config_labels(remote.repository, config_digest)
        what = str(pinned)

        # 1. The registry's own metadata against what was asked for (nothing transferred yet).
        name, version = labels.get(LABEL_NAME), labels.get(LABEL_VERSION)
        if not name or not version or not labels.get(LABEL_MANIFEST):
            raise VerificationError(
                f"{what} is not an envreg environment image (no io.envreg.* labels)",
                "push environments with `envreg push`",
            )
        if want_name and name != want_name:
            raise VerificationError(
                f"{remote} is labelled {name}:{version}, not {want_name}: the tag points at another environment",
                "the registry's tag was moved or overwritten; pull by a digest you trust (`envreg.lock`)",
            )
        if remote.tag and remote.tag != "latest" and not remote.digest and version != remote.tag:
            raise VerificationError(
                f"{remote} is labelled version {version}, not {remote.tag}: the tag was moved",
                "pull by a digest you trust (`envreg pull --locked`)",
            )
        if remote.digest and remote.digest not in (mdigest, config_digest, labels.get(LABEL_MANIFEST)):
            raise VerificationError(f"{what} does not have the digest {remote.digest} that was asked for")
        if expect is not None:
            _check_expected(expect, name, version, config_digest, labels.get(LABEL_MANIFEST), what)
        recorded = index.get(name, version)
        if recorded and recorded.image_id != config_digest and not replace:
            raise VerificationError(
                f"{name}:{version} is recorded here as image {short(recorded.image_id)} (manifest "
                f"{short(recorded.manifest_digest)}), but {remote} is image {short(config_digest)} "
                f"(manifest {short(labels.get(LABEL_MANIFEST))}): the tag now points at another image",
                f"pull a pinned digest (`envreg pull {name}@{recorded.image_id}`), or replace the recorded "
                f"version on purpose: `envreg pull {ref} --replace`",
            )

        # 2. Transfer (by digest), unless the engine has the image already.
        transferred = before is None
        if transferred:
            engine.pull(pinned.repo, mdigest, _engine_auth(rc), progress)
        try:
            info = engine.image_info(pinned.pinned() if transferred else config_digest)
            if info is None:
                raise VerificationError(f"the engine reports no image for {what} after pulling it")
            if info.id != config_digest:
                raise VerificationError(
                    f"{what}: the engine pulled image {info.id} but the registry's manifest declares {config_digest}"
                )
            if info.labels != labels:
                raise VerificationError(
                    f"{what}: the pulled image's labels differ from the registry's config"
                )
            manifest = engine.verified_manifest(info, what)
            if expect is not None:
                _check_expected(expect, manifest.name, manifest.version, info.id, manifest.digest, what)
            engine.tag(info.id, local_tag(manifest.name, manifest.version))
            record = index.record_image(info.id, "pulled", repo_digest=f"{pinned.repo}@{mdigest}")
        except BaseException:
            if transferred:
                _discard(config_digest, pinned)
            raise
    return PullResult(record, transferred, pinned)


def _check_expected(
    expect: LockEntry,
    name: str | None,
    version: str | None,
    image_id: str,
    manifest_digest: str | None,
    what: str,
) -> None:
    if (name, version) != (expect.name, expect.version):
        raise VerificationError(f"{what} is {name}:{version}, but the lockfile pins {expect.ref}")
    if image_id != expect.image_id:
        raise VerificationError(
            f"{what}: image {image_id} is not the locked {expect.image_id} for {expect.ref}",
            "the registry no longer serves the locked image; re-lock on purpose with `envreg lock`",
        )
    if manifest_digest != expect.manifest_digest:
        raise VerificationError(
            f"{what}: manifest {manifest_digest} is not the locked {expect.manifest_digest} for {expect.ref}"
        )


def _discard(image_id: str, pinned: RemoteRef) -> None:
    """Remove what a refused pull brought in (it was not in the engine before)."""
    with contextlib.suppress(Exception):
        engine.untag(pinned.pinned())
    with contextlib.suppress(Exception):
        engine.remove_image(image_id)


# ------------------------------------------------------------------------------------------------------ lock


def lock(
    names: Iterable[str],
    registry: str | None = None,
    *,
    namespace: str = DEFAULT_NAMESPACE,
    index: LocalIndex | None = None,
    credentials: Credentials | bool | None = True,
) -> Lockfile:
    """Pin environments by image ID and manifest digest (and registry digest).

    From the local index, or, with `registry`, from the registry's metadata (nothing pulled)."""
    index = index or LocalIndex()
    entries: list[LockEntry] = []
    registry = default_registry(registry)
    for name in names:
        if registry:
            env = EnvRef.parse(name)
            remote = remote_for(env, registry, namespace)
            with _client(remote.registry, credentials) as rc:
                if env.digest:
                    mdigest, doc = _find_by_digest(rc, remote.repository, env.digest)
                else:
                    mdigest, doc = rc.image_manifest(
                        remote.repository, env.version or _newest_tag(rc, remote.repository)
                    )
                labels = rc.config_labels(remote.repository, doc["config"]["digest"])
            if labels.get(LABEL_NAME) != env.name or not labels.get(LABEL_MANIFEST):
                raise VerificationError(
                    f"{remote} is not the environment {env.name} (labels: {labels.get(LABEL_NAME)})"
                )
            entries.append(
                LockEntry(
                    env.name,
                    labels[LABEL_VERSION],
                    doc["config"]["digest"],
                    labels[LABEL_MANIFEST],
                    remote.repo,
                    mdigest,
                )
            )
        else:
            rec = index.resolve(name)
            repo, _, digest = (rec.repo_digest or "").partition("@")
            entries.append(
                LockEntry(
                    rec.name, rec.version, rec.image_id, rec.manifest_digest, repo or None, digest or None
                )
            )
    return Lockfile(entries)


def pull_locked(
    lockfile: Lockfile,
    *,
    index: LocalIndex | None = None,
    credentials: Credentials | bool | None = True,
    progress: Progress | None = None,
) -> list[PullResult]:
    """Install exactly what a lockfile pins (by registry digest), verifying image ID and manifest digest."""
    index = index or LocalIndex()
    results = []
    for e in lockfile.environments:
        if not e.pull_ref:
            info = engine.image_info(e.image_id)
            if info is None:
                raise RegistryError(
                    f"the lockfile pins {e.ref} without a registry, and the engine does not have {short(e.image_id)}",
                    f"push it (`envreg push {e.ref} --registry HOST`) and lock again, or load an archive",
                )
            manifest = engine.verified_manifest(info, e.ref)
            _check_expected(e, manifest.name, manifest.version, info.id, manifest.digest, e.ref)
            rec = index.record_image(info.id, "pulled")
            results.append(PullResult(rec, False, RemoteRef("", "", e.version)))
            continue
        results.append(
            pull(e.pull_ref, expect=e, replace=True, index=index, credentials=credentials, progress=progress)
        )
    return results


# ---------------------------------------------------------------------------------------------------- search


@dataclass
class SearchHit:
    name: str
    version: str
    description: str
    where: str  # "local" or the registry repository ("host/repo")
    matched: list[str]  # "name", "description", "tool:<name>"
    tools: list[str] = field(default_factory=list)
    image_id: str | None = None
    manifest_digest: str | None = None
    repo_digest: str | None = None  # "host/repo@sha256:..." for registry hits

    def to_json(self) -> dict[str, Any]:
        return self.__dict__.copy()


def _match(
    text: str, name: str, description: str, tools: list[str], tool_descriptions: list[str]
) -> list[str]:
    t = text.lower()
    out = []
    if t in name.lower():
        out.append("name")
    if t in description.lower():
        out.append("description")
    out += [f"tool:{n}" for n in tools if t in n.lower()]
    if not any(m.startswith("tool:") for m in out):
        out += [
            f"tool-description:{n}" for n, d in zip(tools, tool_descriptions, strict=False) if t in d.lower()
        ]
    return out


def _numeric(version: str) -> list[int]:
    return [int(p) for p in version.replace("-", ".").split(".") if p.isdigit()]


def _manifest_cache(digest: str) -> Path:
    from envreg.home import envreg_home

    return envreg_home() / "cache" / "manifests" / f"{digest.replace(':', '-')}.json"


def _cached_manifest(digest: str, index: LocalIndex) -> Manifest | None:
    for rec in index.list():
        if rec.manifest_digest == digest:
            return rec.load_manifest()
    path = _manifest_cache(digest)
    if path.is_file():
        with contextlib.suppress(ValueError):
            m = Manifest.loads(path.read_text())
            m.verify()
            if m.digest == digest:
                return m
    return None


def remote_manifest(rc: RegistryClient, img: RemoteImage, index: LocalIndex) -> Manifest | None:
    """The environment manifest of a registry image, without pulling it: the local index, the cache, or the
    small top layer that holds `/env/manifest.json` (verified against the label before it is believed)."""
    digest = img.labels.get(LABEL_MANIFEST)
    if not digest:
        return None
    cached = _cached_manifest(digest, index)
    if cached:
        return cached
    raw = rc.find_file(img.repository, img.layers, "/env/manifest.json")
    if raw is None:
        return None
    try:
        m = Manifest.loads(raw)
        m.verify()
    except ValueError:
        return None
    if m.digest != digest:
        return None
    path = _manifest_cache(digest)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(m.dumps())
    return m


def remote_images(
    registry: str,
    *,
    namespace: str | None = None,
    credentials: Credentials | bool | None = True,
    workers: int = 16,
) -> tuple[RegistryClient, list[RemoteImage]]:
    """Every envreg environment image in a registry (one per manifest digest), from metadata alone."""
    rc = _client(normalize_registry(registry), credentials)
    repos = rc.catalog()
    if namespace:
        repos = [r for r in repos if r.startswith(namespace.strip("/") + "/")]

    def per_repo(repo: str) -> list[RemoteImage]:
        seen: dict[str, RemoteImage] = {}
        for t in rc.tags(repo):
            try:
                img = rc.image(repo, t)
            except RegistryError:
                continue
            if img.digest in seen:
                seen[img.digest].tags.append(t)
                continue
            img.tags.append(t)
            seen[img.digest] = img
        return [i for i in seen.values() if i.labels.get(LABEL_NAME)]

    with ThreadPoolExecutor(max_workers=workers) as pool:
        found = [img for imgs in pool.map(per_repo, repos) for img in imgs]
    return rc, found


def search(
    text: str,
    registry: str | None = None,
    *,
    namespace: str | None = None,
    index: LocalIndex | None = None,
    credentials: Credentials | bool | None = True,
    workers: int = 16,
) -> list[SearchHit]:
    """Environments whose name, description or tool names contain `text`, in the local index and (when given)
    a registry. Registry images are read through the HTTP API only (nothing pulled)."""
    index = index or LocalIndex()
    hits: list[SearchHit] = []
    for rec in index.list():
        m = rec.load_manifest()
        tools = [t.name for t in m.tools]
        matched = _match(text, m.name, m.description, tools, [t.description for t in m.tools])
        if matched:
            hits.append(
                SearchHit(
                    m.name,
                    m.version,
                    m.description,
                    "local",
                    matched,
                    tools,
                    rec.image_id,
                    rec.manifest_digest,
                    rec.repo_digest,
                )
            )
    registry = default_registry(registry)
    if registry:
        rc, images = remote_images(registry, namespace=namespace, credentials=credentials, workers=workers)
        with rc:

            def one(img: RemoteImage) -> SearchHit | None:
                labels = img.labels
                name, version = labels[LABEL_NAME], labels.get(LABEL_VERSION, "?")
                desc = labels.get("org.opencontainers.image.description", "")
                tool_descs: list[str] = []
                if labels.get(LABEL_TOOLS):
                    tools = [t for t in labels[LABEL_TOOLS].split(",") if t]
                else:
                    m = remote_manifest(rc, img, index)
                    tools = [t.name for t in m.tools] if m else []
                    tool_descs = [t.description for t in m.tools] if m else []
                    desc = desc or (m.description if m else "")
                matched = _match(text, name, desc, tools, tool_descs)
                if not matched:
                    return None
                return SearchHit(
                    name,
                    version,
                    desc,
                    f"{rc.registry}/{img.repository}",
                    matched,
                    tools,
                    img.config_digest,
                    labels.get(LABEL_MANIFEST),
                    f"{rc.registry}/{img.repository}@{img.digest}",
                )

            with ThreadPoolExecutor(max_workers=workers) as pool:
                hits += [h for h in pool.map(one, images) if h]
    hits.sort(key=lambda h: (h.name, h.where != "local", h.where, [-p for p in _numeric(h.version)]))
    return hits


# ------------------------------------------------------------------------------------------- save and load

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
        info = engine.image_info(rec.image_id)
        if info is None:
            raise NotFound(
                f"{rec.ref}: the engine no longer has image {short(rec.image_id)}",
                f"rebuild or pull it, or forget it: `envreg rm {rec.ref}`",
            )
        m = engine.verified_manifest(info, rec.ref)
        if m.digest != rec.manifest_digest:
            raise VerificationError(
                f"{rec.ref}: image manifest {m.digest} is not the recorded {rec.manifest_digest}"
            )
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


def load(
    path: Path | str,
    *,
    index: LocalIndex | None = None,
    progress: Progress | None = None,
) -> list[IndexRecord]:
    """Load an archive written by `save`: verify every member first, load the images into the engine,
    check each against the archive's lock (image ID, manifest digest) and record them ("loaded").
    On any mismatch nothing is recorded and images that were not there before are removed."""
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
        checked: list[tuple[LockEntry, str]] = []
        for e in lockfile.environments:
            info = engine.image_info(e.image_id)
            if info is None:
                raise _bad_archive(path, f"{e.ref}: image {e.image_id} is not in {IMAGES_MEMBER}")
            m = engine.verified_manifest(info, e.ref)
            _check_expected(e, m.name, m.version, info.id, m.digest, f"{path}:{e.ref}")
            checked.append((e, info.id))
        records = []
        for e, image_id in checked:
            repo_digest = e.pull_ref
            records.append(index.record_image(image_id, "loaded", repo_digest=repo_digest))
    except BaseException:
        for e in lockfile.environments:
            if e.image_id not in before:
                with contextlib.suppress(Exception):
                    engine.remove_image(e.image_id)
        raise
    return records


# ------------------------------------------------------------------------------------------------------- rm


def rm(ref: str, *, keep_image: bool = False, index: LocalIndex | None = None) -> list[IndexRecord]:
    """Forget `name` (every version) or `name:version` and untag its image (removed when nothing else names it)."""
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
            if r.repo_digest and r.repo_digest in info.repo_digests:
                engine.untag(r.repo_digest)
    return targets
