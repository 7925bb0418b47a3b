"""Resolve an environment reference to a local image ID (the local index, else `envreg.lock`, else the tag
`envreg build` gives; never a search by label), and check the image's environment code against its
manifest once per image ID and process."""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

import docker.errors

from envreg.docker_engine import engine_errors
from envreg.errors import EngineError, ImageNotFound, VerificationError
from envreg.protocol import MANIFEST_DIGEST_LABEL, NAME_LABEL, VERSION_LABEL

logger = logging.getLogger("envreg.runtime")
_verified: set[str] = set()
_verify_lock = threading.Lock()


def resolve_image(client: Any, ref: str) -> str:
    """``name`` (newest), ``name:version``, ``name@sha256:...``, an image reference or ID -> image ID.

    Names resolve through the local index (`envreg build`, `pull` and `load` write it); a name the
    index does not know resolves through ``envreg.lock`` in the working folder (its image ID), else
    the tag `envreg build` gives; an image of another repository with the same labels is never picked
    (the choice is logged on ``envreg.runtime``). Whatever the reference, the image must be the one this
    host records for its name and version (`recorded_as`): a retagged or rebuilt look-alike is refused. First, the
    image's ``/env`` must be the code its manifest records (read without running it, once per image ID and
    process); otherwise `VerificationError` names the files that differ. An image without envreg's labels is
    `ImageNotFound`: it is not an environment.
    """
    image_id = _resolve(client, ref)
    labels = environment_labels(client, image_id)
    with _verify_lock:
        if image_id not in _verified:
            from envreg.registry.engine import verify_image_source

            verify_image_source(client, image_id, ref if ref != image_id else None)
            _verified.add(image_id)
    recorded_as(image_id, labels, ref)
    return image_id


def environment_labels(client: Any, image_id: str) -> dict[str, str]:
    """The image's labels; `ImageNotFound` when it is not an envreg environment image."""
    with engine_errors(f"inspecting {image_id[:19]}"):
        labels = client.images.get(image_id).labels or {}
    if not labels.get(NAME_LABEL) or not labels.get(MANIFEST_DIGEST_LABEL):
        raise ImageNotFound(
            f"image {image_id[:19]} is not an envreg environment image (no {NAME_LABEL} and "
            f"{MANIFEST_DIGEST_LABEL} labels)",
            "environment images are built with `envreg build` or pulled with `envreg pull`",
        )
    return labels


def recorded_as(image_id: str, labels: dict[str, str], ref: str) -> str | None:
    """How this host binds the whole image (every layer and its config, through the image ID, which is their
    digest): the local index's record of its name and version, else `envreg.lock`'s entry here. Returns that
    record's description, or None when neither has one (then only ``/env`` is verified). Raises
    `VerificationError` when the record names another image: a layer (site-packages, the base) or the
    config changed after it was built, pulled or locked."""
    from envreg.registry.index import default_index
    from envreg.registry.refs import short

    name, version = labels[NAME_LABEL], labels.get(VERSION_LABEL, "")
    record = default_index().get(name, version)
    if record is not None:
        recorded, where, how = record.image_id, "the local index", f" ({record.source} {record.local_ref})"
        hint = (
            f"run the recorded image (`{name}:{version}`), or record this one if you built it: "
            f"`envreg build {name} --force`, `envreg pull` or `envreg load`"
        )
    else:
        locked = _locked(name, version, exact=True)
        if locked is None:
            return None
        recorded, where, how = locked.image_id, "envreg.lock", ""
        hint = "install what the lock pins (`envreg pull --locked`) or lock this image (`envreg lock`)"
    if recorded != image_id:
        raise VerificationError(
            f"{ref} is {name}:{version}, but not the image {where} records for it{how}: its content is "
            f"{short(image_id)}, the record's {short(recorded)} (a layer or the image config changed after it "
            "was recorded)",
            hint,
        )
    return where + how


def _resolve(client: Any, ref: str) -> str:
    from envreg.registry.refs import is_digest

    if "/" in ref or is_digest(ref):  # a full reference, or an image ID
        try:
            return client.images.get(ref).id
        except docker.errors.ImageNotFound:
            raise ImageNotFound(
                f"no image {ref!r} in the engine: build it (`envreg build`) or pull it"
            ) from None
    from envreg.registry import NotFound, resolve

    try:
        record = resolve(ref)
    except NotFound:
        return _unindexed(client, ref)
    try:
        image_id = client.images.get(record.image_id).id
    except docker.errors.ImageNotFound:
        raise ImageNotFound(
            f"{ref} is in the index as {record.image_id[:19]}, but that image is gone from the engine: "
            f"`envreg pull {record.ref}` or `envreg build {record.name}`"
        ) from None
    _chosen(ref, image_id, f"the local index ({record.source} {record.ref})")
    return image_id


def _chosen(ref: str, image_id: str, how: str) -> None:
    logger.info("%s resolved to image %s through %s", ref, image_id[:19], how)


def _unindexed(client: Any, ref: str) -> str:
    """A name the local index does not know: a digest named with it, `envreg.lock` (here), or the tag
    `envreg build` gives (`<prefix><name>:<version>`, `:latest` without one), never another repository's
    image that carries the same labels."""
    name, _, digest = ref.partition("@")
    name, _, version = name.partition(":")
    if digest:
        try:
            image = client.images.get(digest)
        except docker.errors.ImageNotFound:
            raise ImageNotFound(
                f"no image {digest} in the engine: pull it with `envreg pull {ref}`"
            ) from None
        if image.labels.get(NAME_LABEL) != name:
            raise EngineError(f"image {digest[:19]} is {image.labels.get(NAME_LABEL)!r}, not {name!r}")
        _chosen(ref, image.id, "its digest")
        return image.id
    locked = _locked(name, version)
    if locked is not None:
        try:
            image_id = client.images.get(locked.image_id).id
        except docker.errors.ImageNotFound:
            raise ImageNotFound(
                f"envreg.lock pins {locked.ref} as {locked.image_id[:19]}, which the engine does not have",
                "install what the lock pins: `envreg pull --locked`",
            ) from None
        _chosen(ref, image_id, f"envreg.lock ({locked.pull_ref or locked.ref})")
        return image_id
    from envreg.registry.refs import local_repo

    own = f"{local_repo(name)}:{version or 'latest'}"
    try:
        image = client.images.get(own)
    except docker.errors.ImageNotFound:
        raise ImageNotFound(
            f"no environment image for {ref!r}: neither the local index, envreg.lock nor {own} has it",
            f"build it with `envreg build {name}` or pull it with `envreg pull {ref}`; images of other "
            "repositories are used only when named in full (HOST/REPO:TAG) or by digest",
        ) from None
    if image.labels.get(NAME_LABEL) != name or (version and image.labels.get(VERSION_LABEL) != version):
        raise ImageNotFound(
            f"{own} is labelled {image.labels.get(NAME_LABEL)}:{image.labels.get(VERSION_LABEL)}, not {ref}",
            f"rebuild it with `envreg build {name} --force`",
        )
    _chosen(ref, image.id, f"envreg build's tag {own}")
    return image.id


def _locked(name: str, version: str, *, exact: bool = False) -> Any:
    """The `envreg.lock` entry (in the working folder) for `name` (and `version`; any version is the newest
    unless `exact`)."""
    from envreg.registry.lockfile import DEFAULT_LOCKFILE, Lockfile
    from envreg.registry.refs import version_key

    path = Path(DEFAULT_LOCKFILE)
    if not path.is_file():
        return None
    entries = [
        e
        for e in Lockfile.read(path).environments
        if e.name == name and (e.version == version or not (version or exact))
    ]
    return max(entries, key=lambda e: version_key(e.version)) if entries else None
