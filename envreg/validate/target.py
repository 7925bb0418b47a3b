"""What `envreg validate` is pointed at: an environment folder, a name or an image reference, resolved to one
local image, with the files it ships under ``/env`` (its manifest, scenarios and source) read without
running it."""

from __future__ import annotations

import io
import shutil
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envreg.errors import EnvregError, ImageNotFound
from envreg.protocol import MANIFEST_DIGEST_LABEL, NAME_LABEL, VERSION_LABEL

ENV_DIR = "/env"
MAX_ENV_BYTES = 256 << 20


@dataclass(frozen=True)
class Target:
    """A validation target as given: `ref` names an image, `folder` the source it should come from."""

    given: str
    ref: str
    folder: Path | None = None

    @classmethod
    def parse(cls, given: str) -> Target:
        """A folder holding an env.py (``images/calendar``, ``./my-env``) or an image reference (``calendar``,
        ``calendar:1.0.0``, ``envreg/calendar:1.0.0``, ``calendar@sha256:...``)."""
        path = Path(given)
        if (path / "env.py").is_file():
            from envreg.manifest import manifest_of

            env = manifest_of(path)  # a foreign folder's in a container sandbox
            return cls(given, f"{env.name}:{env.version}", path.resolve())
        if given.endswith("/") or path.is_dir():
            raise EnvregError(
                f"{given} is a folder without an env.py",
                "give an environment folder (with env.py), an environment name or an image reference",
            )
        return cls(given, given)


@dataclass
class Image:
    """One environment image: its ID, labels and config, and its ``/env`` tree extracted to `env_dir`."""

    id: str
    labels: dict[str, str]
    user: str
    env_dir: Path
    attrs: dict[str, Any] = field(repr=False, default_factory=dict)

    @property
    def name(self) -> str:
        return self.labels.get(NAME_LABEL, "")

    @property
    def version(self) -> str:
        return self.labels.get(VERSION_LABEL, "")

    @property
    def manifest_label(self) -> str:
        return self.labels.get(MANIFEST_DIGEST_LABEL, "")

    @property
    def runtime_ref(self) -> str:
        """The reference that makes the runtime start exactly this image."""
        return f"{self.name}@{self.id}"

    def cleanup(self) -> None:
        shutil.rmtree(self.env_dir, ignore_errors=True)


def resolve(client: Any, target: Target) -> Image:
    """Resolve `target` to a local image and extract its ``/env``; raises an `EnvregError` saying what to do."""
    import docker.errors

    from envreg.runtime.images import resolve_image

    image_id = resolve_image(client, target.ref)
    try:
        attrs = client.api.inspect_image(image_id)
    except docker.errors.ImageNotFound:
        raise ImageNotFound(f"image {image_id[:19]} disappeared while being validated") from None
    config = attrs.get("Config") or {}
    labels = dict(config.get("Labels") or {})
    if not labels.get(NAME_LABEL) or not labels.get(MANIFEST_DIGEST_LABEL):
        raise ImageNotFound(
            f"{target.ref} ({image_id[:19]}) is not an envreg environment image "
            f"(no {NAME_LABEL} and {MANIFEST_DIGEST_LABEL} labels)",
            "environment images are built with `envreg build` or pulled with `envreg pull`",
        )
    env_dir = Path(tempfile.mkdtemp(prefix="envreg-validate-"))
    try:
        extract_env(client, image_id, env_dir)
    except BaseException:
        shutil.rmtree(env_dir, ignore_errors=True)
        raise
    return Image(image_id, labels, str(config.get("User") or ""), env_dir, attrs)


def extract_env(client: Any, image_id: str, dest: Path) -> None:
    """Copy the image's ``/env`` into `dest` from a created, never started container (removed at once)."""
    import docker.errors

    container = client.api.create_container(image_id, command=["true"], entrypoint=[], network_disabled=True)
    try:
        try:
            stream, _stat = client.api.get_archive(container["Id"], ENV_DIR)
        except docker.errors.NotFound:
            raise EnvregError(
                f"image {image_id[:19]} has no {ENV_DIR}: it is not an environment image"
            ) from None
        data = bytearray()
        for chunk in stream:
            data += chunk
            if len(data) > MAX_ENV_BYTES:
                raise EnvregError(f"image {image_id[:19]}: {ENV_DIR} is over {MAX_ENV_BYTES >> 20} MiB")
    finally:
        client.api.remove_container(container["Id"], force=True)
    with tarfile.open(fileobj=io.BytesIO(bytes(data))) as tar:
        for member in tar.getmembers():
            # the archive's root is the folder itself (env/...): strip it
            member.name = member.name.partition("/")[2]
        members = [m for m in tar.getmembers() if m.name and (m.isfile() or m.isdir())]
        tar.extractall(dest, members=members, filter="data")
