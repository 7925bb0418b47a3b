"""Bare names resolve through the local index, `envreg.lock` or `envreg build`'s own tag, never by label.

A look-alike image from another repository carrying the same `io.envreg.*` labels is not picked, and an image
whose layers changed outside `/env` (a site-packages implant) is refused by any reference, the runtime and
`envreg validate`, wherever this host records its name and version.
"""

from __future__ import annotations

import io
import logging
import os
import subprocess
import sys
import tarfile
import uuid

import docker
import pytest

from envreg.config import image_prefix
from envreg.errors import ImageNotFound, VerificationError
from envreg.registry import index
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


@pytest.fixture
def implant(client):
    """calendar 1.0.0 with a `.pth` file added to the server's site-packages (code that runs at every start of
    Python), under another repository's tag: `/env`, the manifest and every label are the original's."""
    # the fixture's own bytes: two tests building the same implant at once got one cached image from the engine,
    # and the first teardown removed it under the other test
    name = f"implant{uuid.uuid4().hex[:6]}"
    pth = f"import os; open('/tmp/implant-ran', 'w').close()  # {name}\n".encode()
    dockerfile = (
        f"FROM {image_prefix()}calendar:1.0.0\n"
        "COPY zz-implant.pth /opt/envreg/lib/python3.11/site-packages/zz-implant.pth\n"
    ).encode()
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as tar:
        for name, data in (("Dockerfile", dockerfile), ("zz-implant.pth", pth)):
            member = tarfile.TarInfo(name)
            member.size = len(data)
            tar.addfile(member, io.BytesIO(data))
    context.seek(0)
    tag = f"{name}/calendar:1.0.0"
    image, _ = client.images.build(fileobj=context, custom_context=True, tag=tag, rm=True, forcerm=True)
    yield image.id, tag
    client.images.remove(image.id, force=True)


def test_a_site_packages_implant_is_refused_where_the_host_records_the_image(
    client, implant, tmp_path, monkeypatch
) -> None:
    monkeypatch.chdir(tmp_path)  # no envreg.lock here
    own = client.images.get(f"{image_prefix()}calendar:1.0.0")
    implant_id, tag = implant
    assert client.images.get(implant_id).labels == own.labels, "the implant keeps every label"

    # nothing recorded here: only /env is verified, and /env is the original's
    assert resolve_image(client, tag) == implant_id

    index.record_image(own.id, "built", tag=False)
    for ref in (tag, implant_id, f"calendar@{implant_id}"):
        with pytest.raises(VerificationError, match="not the image the local index records for it") as info:
            resolve_image(client, ref)
        assert implant_id.removeprefix("sha256:")[:12] in str(info.value)
        assert own.id.removeprefix("sha256:")[:12] in str(info.value)
    assert resolve_image(client, "calendar:1.0.0") == own.id

    # validate refuses it before running anything
    proc = subprocess.run(
        [sys.executable, "-m", "envreg.cli.main", "validate", tag, "--check", "manifest"],
        capture_output=True,
        text=True,
        env=os.environ.copy(),
        timeout=300,
    )
    assert proc.returncode == 1 and "not the image the local index records" in proc.stdout, proc.stdout
    assert not client.containers.list(all=True, filters={"ancestor": implant_id})

    # without an index record, envreg.lock binds it the same way
    index.default_index().remove("calendar")
    Lockfile([LockEntry("calendar", "1.0.0", own.id, own.labels["io.envreg.manifest.digest"])]).write(
        tmp_path / "envreg.lock"
    )
    with pytest.raises(VerificationError, match=r"not the image envreg\.lock records for it"):
        resolve_image(client, tag)


@pytest.mark.anyio
async def test_the_runtime_starts_no_container_of_an_implant(client, implant) -> None:
    from envreg.runtime import Runtime

    own = client.images.get(f"{image_prefix()}calendar:1.0.0")
    index.record_image(own.id, "built", tag=False)
    implant_id, tag = implant
    async with Runtime() as rt:
        with pytest.raises(VerificationError, match="a layer or the image config changed"):
            await rt.sandbox(tag, isolation="container")
    assert not client.containers.list(all=True, filters={"ancestor": implant_id})
