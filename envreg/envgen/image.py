"""Build a revision's folder into an image with `envreg build`, as a user would (a subprocess: its manifest is
generated in a container sandbox, the folder being foreign code)."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from envreg.errors import EnvregError


class BuildFailed(EnvregError):
    """`envreg build` refused the folder or the image build failed; the message ends with what it printed."""

    status = 422


@dataclass(frozen=True)
class Built:
    tag: str
    image_id: str
    manifest_digest: str


def build_image(images_dir: Path, manifests_dir: Path, name: str, *, timeout: float = 1800.0) -> Built:
    """``envreg build --force --images-dir DIR --manifests-dir DIR NAME``: the image of ``DIR/NAME``.

    ``--force`` moves ``<prefix><name>:<version>`` to each new revision (their manifests differ, and a
    revision is not a release): the run's log keeps every revision's image ID."""
    command = [
        sys.executable,
        "-m",
        "envreg.cli.main",
        "build",
        "--json",
        "--force",
        "--images-dir",
        str(images_dir),
        "--manifests-dir",
        str(manifests_dir),
        name,
    ]
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise BuildFailed(f"envreg build {name} did not finish within {timeout:.0f} s") from None
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-15:])
        raise BuildFailed(f"envreg build {name} failed (exit {proc.returncode}):\n{tail}")
    try:
        rows = {row["name"]: row for row in json.loads(proc.stdout)}
        row = rows[name]
    except (ValueError, KeyError):
        raise BuildFailed(f"envreg build {name} printed no row for it:\n{proc.stdout[-2000:]}") from None
    return Built(row["tag"], row["image_id"], row["manifest_digest"])
