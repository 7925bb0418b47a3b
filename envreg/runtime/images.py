"""Resolve an environment reference to a local image ID."""

from __future__ import annotations

from typing import Any

import docker.errors

from envreg.runtime.errors import EngineError

NAME_LABEL = "io.envreg.name"
VERSION_LABEL = "io.envreg.version"


def resolve_image(client: Any, ref: str) -> str:
    """``name`` (newest), ``name:version``, ``name@sha256:<image id>``, or any image reference -> image ID."""
    name, _, digest = ref.partition("@")
    name, _, version = name.partition(":") if "/" not in name else (name, "", "")
    if digest:
        try:
            image = client.images.get(digest)
        except docker.errors.ImageNotFound:
            raise EngineError(f"no image {digest} in the engine: pull it with `envreg pull {ref}`") from None
        if name and "/" not in name and image.labels.get(NAME_LABEL) != name:
            raise EngineError(f"image {digest[:19]} is {image.labels.get(NAME_LABEL)!r}, not {name!r}")
        return image.id
    if "/" in ref:
        try:
            return client.images.get(ref).id
        except docker.errors.ImageNotFound:
            raise EngineError(
                f"no image {ref!r} in the engine: build it (`envreg build`) or pull it"
            ) from None
    filters = {"label": [f"{NAME_LABEL}={name}"] + ([f"{VERSION_LABEL}={version}"] if version else [])}
    images = client.images.list(filters=filters)
    if not images:
        raise EngineError(
            f"no environment image for {ref!r}: build it with `envreg build {name}` or pull it with `envreg pull {ref}`"
        )
    return max(images, key=lambda i: i.attrs.get("Created", "")).id
