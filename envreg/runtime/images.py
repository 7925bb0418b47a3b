"""Resolve an environment reference to a local image ID (through the local index, else by label), and check
the image's environment code against its manifest once per image ID and process."""

from __future__ import annotations

import threading
from typing import Any

import docker.errors

from envreg.docker_engine import engine_errors
from envreg.errors import EngineError, ImageNotFound
from envreg.protocol import MANIFEST_DIGEST_LABEL, NAME_LABEL, VERSION_LABEL

_verified: set[str] = set()
_verify_lock = threading.Lock()


def resolve_image(client: Any, ref: str) -> str:
    """``name`` (newest), ``name:version``, ``name@sha256:...`` or an image reference -> image ID.

    Names resolve through the local index (`envreg build`, `pull` and `load` write it); a name the
    index does not know falls back to the newest local image labelled ``io.envreg.name``. The image's
    ``/env`` must be the code its manifest records (read without running it, once per image ID and
    process); otherwise `envreg.registry.VerificationError` names the files that differ. An image
    without envreg's labels is `ImageNotFound`: it is not an environment.
    """
    image_id = _resolve(client, ref)
    environment_labels(client, image_id)
    with _verify_lock:
        if image_id not in _verified:
            from envreg.registry.engine import verify_image_source

            verify_image_source(client, image_id, ref if ref != image_id else None)
            _verified.add(image_id)
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


def _resolve(client: Any, ref: str) -> str:
    if "/" in ref:
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
        return _newest_labelled(client, ref)
    try:
        return client.images.get(record.image_id).id
    except docker.errors.ImageNotFound:
        raise ImageNotFound(
            f"{ref} is in the index as {record.image_id[:19]}, but that image is gone from the engine: "
            f"`envreg pull {record.ref}` or `envreg build {record.name}`"
        ) from None


def _newest_labelled(client: Any, ref: str) -> str:
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
        return image.id
    filters = {"label": [f"{NAME_LABEL}={name}"] + ([f"{VERSION_LABEL}={version}"] if version else [])}
    images = client.images.list(filters=filters)
    if not images:
        raise ImageNotFound(
            f"no environment image for {ref!r}: build it with `envreg build {name}` or pull it with `envreg pull {ref}`"
        )
    # `envreg build`'s own tag (envreg/<name>:...) first: an untagged image left by an earlier build may
    # carry a later creation time (images are stamped with their commit's time)
    from envreg.registry.refs import local_repo

    own = f"{local_repo(name)}:"
    return max(images, key=lambda i: (any(t.startswith(own) for t in i.tags), i.attrs.get("Created", ""))).id
