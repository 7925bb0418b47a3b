"""Resolve an environment reference to a local image ID: through the local index, else by label."""

from __future__ import annotations

from typing import Any

import docker.errors

from envreg.errors import EngineError, ImageNotFound
from envreg.protocol import NAME_LABEL, VERSION_LABEL


def resolve_image(client: Any, ref: str) -> str:
    """``name`` (newest), ``name:version``, ``name@sha256:...`` or an image reference -> image ID.

    Names resolve through the local index (`envreg build`, `pull` and `load` write it); a name the
    index does not know falls back to the newest local image labelled ``io.envreg.name``.
    """
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
    return max(images, key=lambda i: i.attrs.get("Created", "")).id
