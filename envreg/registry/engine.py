"""The Docker engine side: image labels, the manifest file inside an image, tags, push/pull streams.

Everything goes through the Docker SDK for Python (`docker`); the engine moves the blobs.
"""

from __future__ import annotations

import contextlib
import io
import tarfile
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from envreg.docker_engine import docker_client
from envreg.manifest import Manifest
from envreg.protocol import MANIFEST_DIGEST_LABEL, NAME_LABEL, VERSION_LABEL
from envreg.registry.errors import NotFound, RegistryError, VerificationError
from envreg.source import MANIFEST_FILE, file_sha256, is_source, source_differences, summarize

if TYPE_CHECKING:
    from envreg.registry.index import IndexRecord

ENV_DIR = "/env"
MANIFEST_PATH = f"{ENV_DIR}/{MANIFEST_FILE}"

Progress = Callable[[dict[str, Any]], None]


def client():
    """A Docker SDK client for the engine (`DOCKER_HOST` etc. honoured)."""
    return _client()


@lru_cache(maxsize=1)
def _client():
    return docker_client(timeout=600)


@dataclass(frozen=True)
class ImageInfo:
    id: str  # the image ID: sha256 of the config blob, stable across push/pull/save/load
    tags: list[str]
    repo_digests: list[str]
    labels: dict[str, str]
    env: list[str]
    size: int

    @property
    def name(self) -> str | None:
        return self.labels.get(NAME_LABEL)

    @property
    def version(self) -> str | None:
        return self.labels.get(VERSION_LABEL)

    @property
    def manifest_digest(self) -> str | None:
        return self.labels.get(MANIFEST_DIGEST_LABEL)

    @property
    def manifest_path(self) -> str:
        for item in self.env:
            if item.startswith("ENVREG_MANIFEST="):
                return item.split("=", 1)[1]
        return MANIFEST_PATH


def image_info(ref: str, docker_client: Any = None) -> ImageInfo | None:
    """Inspect a local image by ID, tag or `repo@digest`; None when the engine does not have it."""
    import docker.errors

    try:
        attrs = (docker_client or client()).api.inspect_image(ref)
    except docker.errors.ImageNotFound:
        return None
    except docker.errors.APIError as exc:
        if exc.status_code == 404:
            return None
        raise
    cfg = attrs.get("Config") or {}
    return ImageInfo(
        id=attrs["Id"],
        tags=list(attrs.get("RepoTags") or []),
        repo_digests=list(attrs.get("RepoDigests") or []),
        labels=dict(cfg.get("Labels") or {}),
        env=list(cfg.get("Env") or []),
        size=int(attrs.get("Size") or 0),
    )


def require_image(ref: str) -> ImageInfo:
    info = image_info(ref)
    if info is None:
        raise NotFound(
            f"the Docker engine has no image {ref}", "build it (`envreg build`) or pull it (`envreg pull`)"
        )
    return info


def read_file(image: str, path: str, limit: int = 16 << 20) -> bytes:
    """A file's bytes from an image, without running it (create a container, copy, remove)."""
    import docker.errors

    c = client()
    container = c.api.create_container(image, command=["true"], entrypoint=[], network_disabled=True)
    try:
        try:
            stream, _stat = c.api.get_archive(container["Id"], path)
        except docker.errors.NotFound:
            raise VerificationError(f"image {image} has no {path}") from None
        data = b"".join(stream)
    finally:
        c.api.remove_container(container["Id"], force=True)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        member = tar.next()
        if member is None or not member.isfile() or member.size > limit:
            raise VerificationError(f"image {image}: {path} is not a regular file")
        f = tar.extractfile(member)
        assert f is not None
        return f.read()


def verified_manifest(info: ImageInfo, ref: str | None = None) -> Manifest:
    """Read the manifest from the image and check it against itself and against the image's labels.

    Raises `VerificationError` naming the first mismatch. Checks metadata only; `verify_image_source`
    also checks the environment's code."""
    _require_labels(info, ref or info.id)
    return _checked_manifest(info, read_file(info.id, info.manifest_path), ref or info.id)


def _require_labels(info: ImageInfo, what: str) -> None:
    if not info.name or not info.version or not info.manifest_digest:
        missing = [k for k in (NAME_LABEL, VERSION_LABEL, MANIFEST_DIGEST_LABEL) if not info.labels.get(k)]
        raise VerificationError(
            f"{what} is not an envreg environment image (no {', '.join(missing)} label)",
            "environment images are built with `envreg build`",
        )


def _checked_manifest(info: ImageInfo, raw: bytes, what: str) -> Manifest:
    try:
        manifest = Manifest.loads(raw)
    except ValueError as exc:
        raise VerificationError(f"{what}: {info.manifest_path} is not a valid manifest ({exc})") from None
    try:
        manifest.verify()
    except ValueError as exc:
        raise VerificationError(f"{what}: {exc}") from None
    if manifest.digest != info.manifest_digest:
        raise VerificationError(
            f"{what}: its label {MANIFEST_DIGEST_LABEL}={info.manifest_digest} does not match the manifest it carries "
            f"({manifest.digest}); the image was altered after it was built"
        )
    if (manifest.name, manifest.version) != (info.name, info.version):
        raise VerificationError(
            f"{what}: labels say {info.name}:{info.version} but its manifest is {manifest.ref}"
        )
    return manifest


def verify_image_source(docker_client: Any, image: str, ref: str | None = None) -> Manifest:
    """Check that an image's environment code is the code its manifest records, without running it.

    Reads ``/env`` out of the image (a created, never started container, removed at once), checks the
    manifest in it against itself and the image's labels, then every file against the manifest's
    `source_files` (`envreg.source` decides which files count). Returns the manifest; raises
    `VerificationError` naming the files that differ."""
    import docker.errors

    info = image_info(image, docker_client)
    what = ref or image
    if info is None:
        raise NotFound(f"the Docker engine has no image {image}", "build it (`envreg build`) or pull it")
    _require_labels(info, what)
    container = docker_client.api.create_container(
        info.id, command=["true"], entrypoint=[], network_disabled=True
    )
    with tempfile.SpooledTemporaryFile(max_size=32 << 20) as buf:
        try:
            try:
                stream, _stat = docker_client.api.get_archive(container["Id"], ENV_DIR)
            except docker.errors.NotFound:
                raise VerificationError(
                    f"{what} has no {ENV_DIR} folder: it is not an environment image"
                ) from None
            for chunk in stream:
                buf.write(chunk)
        finally:
            docker_client.api.remove_container(container["Id"], force=True)
        buf.seek(0)
        actual, odd, raw_manifest = _read_env_tar(buf, info.manifest_path)
    if raw_manifest is None:
        raw_manifest = read_file(info.id, info.manifest_path)
    manifest = _checked_manifest(info, raw_manifest, what)
    differences = odd + source_differences(manifest.source_files, actual)
    if differences:
        raise VerificationError(
            f"{what}: its environment code differs from the source its manifest records "
            f"({summarize(f'{ENV_DIR}/{line}' for line in differences)}); the image was altered after it was built",
            "do not run it: pull it by a digest you trust or build it again from source (`envreg build`)",
        )
    return manifest


def _read_env_tar(fileobj: Any, manifest_path: str) -> tuple[dict[str, str], list[str], bytes | None]:
    """(source path -> sha256, lines for entries that are not regular files, the manifest's bytes if under /env)."""
    hashes: dict[str, str] = {}
    odd: list[str] = []
    raw_manifest = None
    inside = manifest_path.removeprefix(f"{ENV_DIR}/") if manifest_path.startswith(f"{ENV_DIR}/") else None
    with tarfile.open(fileobj=fileobj, mode="r:") as tar:
        for member in tar:
            rel = member.name.partition("/")[2]  # the archive's root is the folder itself: env/...
            if not rel or member.isdir():
                continue
            if rel == inside and member.isfile():
                f = tar.extractfile(member)
                assert f is not None
                raw_manifest = f.read()
                continue
            if not is_source(rel):
                continue
            if not member.isfile():
                odd.append(f"{rel} is not a regular file")
                continue
            f = tar.extractfile(member)
            assert f is not None
            hashes[rel] = file_sha256(f.read())
    return hashes, odd, raw_manifest


def recorded_image(record: IndexRecord) -> tuple[ImageInfo, Manifest]:
    """The engine's image for an index record, with its manifest checked against the record."""
    from envreg.registry.refs import short

    info = image_info(record.image_id)
    if info is None:
        raise NotFound(
            f"{record.ref} is in the index but the engine no longer has its image {short(record.image_id)}",
            f"rebuild or pull it again, or forget it: `envreg rm {record.ref}`",
        )
    manifest = verified_manifest(info, record.ref)
    if manifest.digest != record.manifest_digest:
        raise VerificationError(
            f"{record.ref}: the image's manifest {manifest.digest} is not the recorded {record.manifest_digest}"
        )
    return info, manifest


def tag(image_id: str, ref: str) -> None:
    repo, _, tag_ = ref.rpartition(":")
    if "/" in tag_ or not repo:
        repo, tag_ = ref, "latest"
    client().api.tag(image_id, repo, tag_, force=True)


def untag(ref: str) -> None:
    """Remove one reference (tag or `repo@digest`); the image goes only when nothing else names it."""
    import docker.errors

    try:
        client().api.remove_image(ref, noprune=False)
    except docker.errors.ImageNotFound:
        pass
    except docker.errors.APIError as exc:
        if exc.status_code not in (404, 409):
            raise


def remove_image(image_id: str) -> None:
    """Remove an image and every tag naming it (only for images this process pulled or loaded)."""
    import docker.errors

    info = image_info(image_id)
    if info is None:
        return
    for ref in [*info.tags, *info.repo_digests]:
        untag(ref)
    with contextlib.suppress(docker.errors.APIError):
        client().api.remove_image(image_id, force=False)


def _events(stream: Iterator[dict[str, Any]], progress: Progress | None, what: str) -> list[dict[str, Any]]:
    events = []
    for ev in stream:
        if "error" in ev or "errorDetail" in ev:
            msg = ev.get("error") or (ev.get("errorDetail") or {}).get("message")
            raise RegistryError(f"{what} failed: {msg}")
        events.append(ev)
        if progress:
            progress(ev)
    return events


def push(repo: str, tag_: str, auth: dict | None, progress: Progress | None = None) -> str:
    """Push `repo:tag` through the engine; returns the registry manifest digest it reports."""
    stream = client().api.push(repo, tag=tag_, stream=True, decode=True, auth_config=auth)
    events = _events(stream, progress, f"push of {repo}:{tag_}")
    for ev in events:
        digest = (ev.get("aux") or {}).get("Digest")
        if digest:
            return digest
    raise RegistryError(f"push of {repo}:{tag_}: the engine did not report a digest")


def pull(repo: str, digest: str, auth: dict | None, progress: Progress | None = None) -> list[dict[str, Any]]:
    """Pull `repo@digest` through the engine (always by digest)."""
    stream = client().api.pull(repo, tag=digest, stream=True, decode=True, auth_config=auth)
    return _events(stream, progress, f"pull of {repo}@{digest}")
