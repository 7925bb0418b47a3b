"""Bare names resolve through the local index, `envreg.lock` or `envreg build`'s own tag, never by label.

A look-alike image from another repository carrying the same `io.envreg.*` labels is not picked.
"""

from __future__ import annotations

import io
import logging
import uuid

import docker
import pytest

from envreg.config import image_prefix
from envreg.errors import ImageNotFound
from envreg.registry.lockfile import LockEntry, Lockfile
from envreg.runtime.images import resolve_image

pytestmark = pytest.mark.docker


@pytest.fixture
def client():
    try:
        engine = docker.from_env()
        engine.images.get(f"{image_prefix()}calendar:1.0.0")
    except docker.errors.DockerException:
        pytest.skip(f"{image_prefix()}calendar:1.0.0 is not built (envreg build calendar)")
    return engine


@pytest.fixture
def lookalike(client):
    """An image of another repository labelled as calendar 9.9.9 (the same code and manifest labels)."""
    tag = f"lookalike{uuid.uuid4().hex[:6]}/calendar:9.9.9"
    dockerfile = f'FROM {image_prefix()}calendar:1.0.0\nLABEL io.envreg.version="9.9.9"\n'
    image, _ = client.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=tag, rm=True, forcerm=True)
    yield image.id, tag
    client.images.remove(image.id, force=True)


def test_a_lookalike_with_the_same_labels_is_not_picked(
    client, lookalike, caplog, tmp_path, monkeypatch
) -> None:
    monkeypatch.chdir(tmp_path)  # no envreg.lock here
    image_id, _ = lookalike
    with pytest.raises(ImageNotFound, match=r"neither the local index, envreg\.lock nor"):
        resolve_image(client, "calendar:9.9.9")
    with caplog.at_level(logging.INFO, logger="envreg.runtime"):
        chosen = resolve_image(client, "calendar")
    assert chosen == client.images.get(f"{image_prefix()}calendar:latest").id != image_id
    assert f"calendar resolved to image {chosen[:19]} through envreg build's tag" in caplog.text


def test_envreg_lock_pins_a_bare_name(client, tmp_path, monkeypatch, caplog) -> None:
    own = client.images.get(f"{image_prefix()}calendar:1.0.0")
    digest = own.labels["io.envreg.manifest.digest"]
    Lockfile([LockEntry("calendar", "1.0.0", own.id, digest)]).write(tmp_path / "envreg.lock")
    monkeypatch.chdir(tmp_path)
    with caplog.at_level(logging.INFO, logger="envreg.runtime"):
        assert resolve_image(client, "calendar") == own.id
    assert "through envreg.lock" in caplog.text
