"""Moving environments between the local index and a registry: push, pull (verified, by digest), lock and
pull --locked.

`push` and `pull` take an optional `progress` callback that receives the engine's JSON progress events; the
CLI renders them with rich.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from envreg.protocol import MANIFEST_DIGEST_LABEL, NAME_LABEL, VERSION_LABEL
from envreg.registry import engine
from envreg.registry.client import Credentials, RegistryClient
from envreg.registry.engine import Progress
from envreg.registry.errors import NotFound, RegistryError, VerificationError
from envreg.registry.index import IndexRecord, LocalIndex
from envreg.registry.lockfile import LockEntry, Lockfile, check_expected
from envreg.registry.refs import (
    DEFAULT_NAMESPACE,
    EnvRef,
    RemoteRef,
    default_registry,
    local_tag,
    parse_remote,
    remote_for,
    short,
    version_key,
)


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
    engine.recorded_image(record)
    remote = remote_for(EnvRef(record.name, record.version), registry, namespace)
    with RegistryClient(remote.registry, credentials) as rc:
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
        if labels.get(MANIFEST_DIGEST_LABEL) == digest:
            return mdigest, doc
    raise NotFound(f"{rc.registry}/{repository} has no image with digest {digest}")


def pull(
    ref: str,
    registry: str | None = None,
    *,
    namespace: str = DEFAULT_NAMESPACE,
    expect: LockEntry | None = None,
    replace: bool = False,
    tag: bool = False,
    index: LocalIndex | None = None,
    credentials: Credentials | bool | None = True,
    progress: Progress | None = None,
) -> PullResult:
    """Pull an environment by digest and record it, or refuse (nothing recorded, what was pulled removed).

    `ref`: `name`, `name:version`, `name@sha256:...` (registry manifest digest, image ID or manifest digest)
    or a full `host/repo[:tag][@digest]`. The registry's manifest is resolved first; the engine then pulls
    exactly that manifest digest. Checked: the labels name and version what was asked for, the digest asked
    for (and `expect`, a lock entry) matches, the pulled image ID is the config digest the registry declares,
    the manifest in the image matches its label, the environment code in the image is the code the
    manifest records (`engine.verify_image_source`), and a version already recorded here is not silently
    replaced by another image (`replace=True` allows it).

    The image keeps the registry's own name (`<registry>/<repository>:<version>`); `envreg/<name>:<version>`,
    which other users of the engine may run, is tagged only with `tag=True`."""
    index = index or LocalIndex()
    remote, want_name = _target(ref, registry, namespace, index)
    with RegistryClient(remote.registry, credentials) as rc:
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
        name, version = labels.get(NAME_LABEL), labels.get(VERSION_LABEL)
        if not name or not version or not labels.get(MANIFEST_DIGEST_LABEL):
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
        if remote.digest and remote.digest not in (mdigest, config_digest, labels.get(MANIFEST_DIGEST_LABEL)):
            raise VerificationError(f"{what} does not have the digest {remote.digest} that was asked for")
        if expect is not None:
            check_expected(expect, name, version, config_digest, labels.get(MANIFEST_DIGEST_LABEL), what)
        recorded = index.get(name, version)
        if recorded and recorded.image_id != config_digest and not replace:
            raise VerificationError(
                f"{name}:{version} is recorded here as image {short(recorded.image_id)} (manifest "
                f"{short(recorded.manifest_digest)}), but {remote} is image {short(config_digest)} "
                f"(manifest {short(labels.get(MANIFEST_DIGEST_LABEL))}): the tag now points at another image",
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
            manifest = engine.verify_image_source(engine.client(), info.id, what)
            if expect is not None:
                check_expected(expect, manifest.name, manifest.version, info.id, manifest.digest, what)
            registry_name = f"{pinned.repo}:{manifest.version}"
            engine.tag(info.id, registry_name)
            shared = local_tag(manifest.name, manifest.version)
            if tag:
                engine.tag(info.id, shared)
            record = index.record_image(
                info.id,
                "pulled",
                repo_digest=f"{pinned.repo}@{mdigest}",
                local_ref=shared if tag else registry_name,
                tag=False,
                verified=manifest,
            )
        except BaseException:
            if transferred:
                _discard(config_digest, pinned)
            raise
    return PullResult(record, transferred, pinned)


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
            with RegistryClient(remote.registry, credentials) as rc:
                if env.digest:
                    mdigest, doc = _find_by_digest(rc, remote.repository, env.digest)
                else:
                    mdigest, doc = rc.image_manifest(
                        remote.repository, env.version or _newest_tag(rc, remote.repository)
                    )
                labels = rc.config_labels(remote.repository, doc["config"]["digest"])
            if labels.get(NAME_LABEL) != env.name or not labels.get(MANIFEST_DIGEST_LABEL):
                raise VerificationError(
                    f"{remote} is not the environment {env.name} (labels: {labels.get(NAME_LABEL)})"
                )
            entries.append(
                LockEntry(
                    env.name,
                    labels[VERSION_LABEL],
                    doc["config"]["digest"],
                    labels[MANIFEST_DIGEST_LABEL],
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
    tag: bool = False,
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
            manifest = engine.verify_image_source(engine.client(), info.id, e.ref)
            check_expected(e, manifest.name, manifest.version, info.id, manifest.digest, e.ref)
            shared = local_tag(manifest.name, manifest.version)
            named = shared if tag or shared in info.tags or not info.tags else info.tags[0]
            rec = index.record_image(info.id, "pulled", tag=tag, local_ref=named, verified=manifest)
            results.append(PullResult(rec, False, RemoteRef("", "", e.version)))
            continue
        results.append(
            pull(
                e.pull_ref,
                expect=e,
                replace=True,
                tag=tag,
                index=index,
                credentials=credentials,
                progress=progress,
            )
        )
    return results
