"""Bake: the staged, self-contained contexts under `.cache/bake/` and the generated variables file that
`docker buildx bake` reads after docker-bake.hcl and the base lock."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envreg.config import image_prefix
from envreg.images.base import BaseLock
from envreg.images.paths import ImageBuildError, Paths
from envreg.images.wheels import build_envreg_wheel, fetch_wheelhouse
from envreg.source import file_sha256, source_differences, source_files, summarize

VENV = "/opt/envreg"


def content_mtime(data: bytes, epoch: int) -> int:
    """A file's staged mtime: `epoch` plus up to 194 days drawn from its content.

    BuildKit sends a context file again only when its size or mtime changed: with one fixed mtime, an
    edit that keeps the size (a digest in a manifest, a renamed identifier) would build the old bytes.
    Drawn from the content, the mtime changes with it and stays reproducible."""
    return epoch + int.from_bytes(hashlib.sha256(data).digest()[:3], "big")


def _sync_dir(dst: Path, files: dict[str, bytes | Path], epoch: int) -> None:
    """Make `dst` hold exactly `files` (relative path -> bytes or source file); folders get the mtime
    `epoch`, files `content_mtime`."""
    wanted = set(files)
    if dst.exists():
        for f in sorted(dst.rglob("*"), reverse=True):
            rel = str(f.relative_to(dst))
            if f.is_file() and rel not in wanted:
                f.unlink()
            elif f.is_dir() and not any(f.iterdir()):
                f.rmdir()
    mtimes: dict[Path, int] = {}
    for rel, src in files.items():
        target = dst / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        data = src.read_bytes() if isinstance(src, Path) else src
        if not target.is_file() or target.read_bytes() != data:
            target.write_bytes(data)
        mode = (src.stat().st_mode & 0o777) if isinstance(src, Path) else 0o644
        os.chmod(target, mode | 0o444)
        mtimes[target] = content_mtime(data, epoch)
    for f in [dst, *dst.rglob("*")]:
        mtime = mtimes.get(f, epoch)
        os.utime(f, (mtime, mtime), follow_symlinks=False)


def stage_base(p: Paths, epoch: int) -> Path:
    """`.cache/bake/base/`: Dockerfile, requirements.lock and the wheels, the whole context of `base`."""
    wheels = fetch_wheelhouse(p)
    envreg_whl = build_envreg_wheel(p)
    files: dict[str, bytes | Path] = {
        "Dockerfile": p.base_dir / "Dockerfile",
        "requirements.lock": p.requirements_lock,
        f"envreg/{envreg_whl.name}": envreg_whl,
    }
    for f in wheels.values():
        files[f"wheels/{f.name}"] = f
    dst = p.stage / "base"
    _sync_dir(dst, files, epoch)
    return dst


def stage_env(p: Paths, name: str, folder: Path, manifest: Path, epoch: int) -> Path:
    """`.cache/bake/env/<name>/`: Dockerfile, env/ (the environment's source files, `envreg.source`) and
    manifest.json, plus wheels/ with the wheels of the folder's own requirements.lock when it has one (e.g.
    bfcl-eval for bfcl-*). Refuses when the files are not the ones the manifest's `source_files` lists."""
    files = source_files(folder)
    contents = {rel: f.read_bytes() for rel, f in files.items()}
    listed = json.loads(manifest.read_text()).get("source_files", {})
    differences = source_differences(listed, {rel: file_sha256(data) for rel, data in contents.items()})
    if differences:
        raise ImageBuildError(
            f"{name}: the environment folder {folder} is not what {manifest} lists ({summarize(differences)}); "
            f"regenerate the manifest with `envreg manifest {name}`"
        )
    staged: dict[str, bytes | Path] = {"Dockerfile": p.base_dir / "env.Dockerfile", "manifest.json": manifest}
    if (folder / "requirements.lock").is_file():
        for wheel in fetch_wheelhouse(p, folder / "requirements.lock").values():
            staged[f"wheels/{wheel.name}"] = wheel
    for rel, data in contents.items():
        staged[f"env/{rel}"] = data
    dst = p.stage / "env" / name
    _sync_dir(dst, staged, epoch)
    return dst


@dataclass(frozen=True)
class EnvImage:
    """What the bake file needs to know about one environment image."""

    name: str
    version: str
    description: str
    manifest_digest: str

    @property
    def tag(self) -> str:
        return f"{image_prefix()}{self.name}:{self.version}"


def base_tag(version: str) -> str:
    """The base image's tag for this envreg version, under the configured prefix."""
    return f"{image_prefix()}base:{version}"


def git_facts(root: Path) -> tuple[str, int | None, str]:
    """(revision, commit time, source url) of the checkout; empty/None where not a git checkout."""

    def git(*args: str) -> str:
        proc = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True)
        return proc.stdout.strip() if proc.returncode == 0 else ""

    rev = git("rev-parse", "HEAD")
    ct = git("log", "-1", "--format=%ct")
    url = git("config", "--get", "remote.origin.url")
    return rev, int(ct) if ct.isdigit() else None, url


def source_date_epoch(root: Path) -> int:
    """`$SOURCE_DATE_EPOCH`, else the last commit's time, else 0."""
    if (v := os.environ.get("SOURCE_DATE_EPOCH", "")).isdigit():
        return int(v)
    return git_facts(root)[1] or 0


def bake_vars(
    envs: list[EnvImage], *, lock: BaseLock, epoch: int, version: str, revision: str, source: str, stage: Path
) -> dict[str, Any]:
    """The generated bake variables file (JSON), passed after docker-bake.hcl and the base lock."""
    created = dt.datetime.fromtimestamp(epoch, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    variables = {
        "BASE_IMAGE": lock.image,
        "SOURCE_DATE_EPOCH": str(epoch),
        "CREATED": created,
        "VERSION": version,
        "PREFIX": image_prefix(),
        "REVISION": revision,
        "SOURCE": source,
        "STAGE": str(stage),
        "ENVS": [
            {
                "name": e.name,
                "version": e.version,
                "description": e.description,
                "manifest_digest": e.manifest_digest,
            }
            for e in envs
        ],
    }
    return {"variable": {k: {"default": v} for k, v in variables.items()}}


def bake_command(
    p: Paths, vars_file: Path, targets: list[str], *, progress: str = "plain", extra: list[str] | None = None
) -> list[str]:
    return [
        "docker",
        "buildx",
        "bake",
        "--load",
        f"--progress={progress}",
        "-f",
        str(p.bake_file),
        "-f",
        str(p.base_lock),
        "-f",
        str(vars_file),
        *(extra or []),
        *targets,
    ]


def envreg_version(root: Path) -> str:
    """The envreg version images are built for: the checkout's pyproject.toml, else the installed one."""
    import tomllib

    pyproject = root / "pyproject.toml"
    if pyproject.is_file():
        return tomllib.loads(pyproject.read_text())["project"]["version"]
    from importlib.metadata import version

    return version("envreg")
