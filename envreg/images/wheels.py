"""The wheelhouse: the server's dependencies pinned with hashes in `images/base/requirements.lock`
(`scripts/lock-wheels`), downloaded into `.cache/wheelhouse/`, plus the envreg wheel built on the host."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from envreg.images.base import SUITE
from envreg.images.paths import ImageBuildError, Paths, log, paths, run, sha256_file

# host-only: the environment server needs none of them (`envreg validate` checks date-time formats with
# rfc3339-validator, which needs six; jsonschema itself is in the image as a dependency of mcp)
EXCLUDED_DEPENDENCIES = {"docker", "fastapi", "rfc3339-validator", "six"}

_REQ_LINE = re.compile(
    r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[^\s;\\]+)\s*(?P<marker>;[^\\-]*)?(?P<rest>.*)$"
)


@dataclass(frozen=True)
class LockedWheel:
    name: str
    version: str
    hashes: tuple[str, ...]
    marker: str = ""


def canonical_name(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_requirements_lock(text: str) -> list[LockedWheel]:
    """Parse `pkg==ver [; marker] --hash=sha256:...` lines (with `\\` continuations and comments)."""
    joined = re.sub(r"\\\s*\n", " ", text)
    out = []
    for raw in joined.splitlines():
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        m = _REQ_LINE.match(line)
        if not m:
            raise ValueError(f"requirements lock: cannot parse {raw.strip()!r}")
        hashes = tuple(re.findall(r"--hash=sha256:([0-9a-f]{64})", line))
        if not hashes:
            raise ValueError(f"requirements lock: {m['name']} has no --hash")
        out.append(
            LockedWheel(
                canonical_name(m["name"]), m["version"], hashes, (m["marker"] or "").strip("; ").strip()
            )
        )
    return out


def format_requirements_lock(wheels: list[LockedWheel], header: str) -> str:
    lines = [header.rstrip()]
    for w in sorted(wheels, key=lambda w: w.name):
        marker = f" ; {w.marker}" if w.marker else ""
        lines.append(f"{w.name}=={w.version}{marker} \\")
        lines += [
            f"    --hash=sha256:{h}" + (" \\" if i < len(w.hashes) - 1 else "")
            for i, h in enumerate(w.hashes)
        ]
    return "\n".join(lines) + "\n"


SERVER_EXTRAS = ("server",)
"""Extras whose requirements the environment server needs too (uvloop; fastapi is host-only)."""


def _requirement_name(requirement: str) -> str:
    return canonical_name(re.split(r"[\s=<>!~;\[]", requirement, maxsplit=1)[0])


def server_requirements(pyproject: Path) -> list[str]:
    """The requirements the environment server needs: pyproject `dependencies` and the `server` extra, minus
    the host-only ones (`EXCLUDED_DEPENDENCIES`)."""
    import tomllib

    project = tomllib.loads(pyproject.read_text())["project"]
    extras = project.get("optional-dependencies", {})
    deps = [*project["dependencies"], *(d for extra in SERVER_EXTRAS for d in extras.get(extra, []))]
    return [d for d in deps if _requirement_name(d) not in EXCLUDED_DEPENDENCIES]


def _pip(*args: str) -> list[str]:
    """Host pip with the machine's config ignored (it adds local indexes and constraints) but its CA kept."""
    cmd = [sys.executable, "-m", "pip", "--isolated", "--disable-pip-version-check", "--no-input"]
    ca = os.environ.get("PIP_CERT") or (
        "/etc/ssl/certs/ca-certificates.crt" if Path("/etc/ssl/certs/ca-certificates.crt").is_file() else ""
    )
    if ca:
        cmd += ["--cert", ca]
    return [*cmd, *args]


_WHEEL_NAME = re.compile(r"^(?P<name>[^-]+)-(?P<version>[^-]+)-.*\.whl$")


def lock_wheels(p: Paths | None = None) -> list[LockedWheel]:
    """Resolve the server's dependencies on PyPI (binary wheels for this python/platform) and write
    images/base/requirements.lock."""
    p = p or paths()
    reqs = server_requirements(p.root / "pyproject.toml")
    markers = {_requirement_name(r): r.split(";", 1)[1].strip() for r in reqs if ";" in r}
    # the versions the host's lock pins (requirements.lock, `scripts/lock`), so that images and CI agree
    constraints = (
        ["-c", str(p.root / "requirements.lock")] if (p.root / "requirements.lock").is_file() else []
    )
    with tempfile.TemporaryDirectory() as tmp:
        run(
            _pip("download", "--only-binary=:all:", "-d", tmp, *constraints, *reqs), stdout=subprocess.DEVNULL
        )
        wheels = []
        for f in sorted(Path(tmp).iterdir()):
            m = _WHEEL_NAME.match(f.name)
            if not m:
                raise ImageBuildError(f"pip downloaded a non-wheel {f.name}")
            name = canonical_name(m["name"])
            wheels.append(LockedWheel(name, m["version"], (sha256_file(f),), markers.get(name, "")))
    pyver = ".".join(map(str, sys.version_info[:2]))
    header = (
        "# Generated by `scripts/lock-wheels` from pyproject.toml `dependencies` and the `server` extra (minus: "
        f"{', '.join(sorted(EXCLUDED_DEPENDENCIES))}), at the versions requirements.lock pins.\n"
        f"# Binary wheels for CPython {pyver} linux x86_64 (the base image's python3 is Debian {SUITE}'s).\n"
        "# Installed offline in the image: pip install --no-index --require-hashes -r requirements.lock"
    )
    p.requirements_lock.write_text(format_requirements_lock(wheels, header))
    log(f"wrote {p.requirements_lock.relative_to(p.root)} ({len(wheels)} wheels)")
    return wheels


def wheel_files(locked: list[LockedWheel], wheelhouse: Path) -> dict[str, Path]:
    """Locked name -> the wheel file in the wheelhouse whose sha256 is locked (only those that are present)."""
    found: dict[str, Path] = {}
    if not wheelhouse.is_dir():
        return found
    by_name: dict[str, list[Path]] = {}
    for f in wheelhouse.glob("*.whl"):
        if m := _WHEEL_NAME.match(f.name):
            by_name.setdefault(canonical_name(m["name"]), []).append(f)
    for w in locked:
        for f in by_name.get(w.name, []):
            if _WHEEL_NAME.match(f.name)["version"] == w.version and sha256_file(f) in w.hashes:  # type: ignore[index]
                found[w.name] = f
    return found


def fetch_wheelhouse(p: Paths | None = None, lock: Path | None = None) -> dict[str, Path]:
    """Download every wheel of `lock` (default: the base image's requirements.lock), hash-checked, into
    .cache/wheelhouse; a no-op when all are there. An environment folder's own requirements.lock goes
    through here too (its wheels are installed into that environment's image only)."""
    p = p or paths()
    lock = lock or p.requirements_lock
    if not lock.is_file():
        raise ImageBuildError(f"{lock} is missing: create it with `scripts/lock-wheels`")
    locked = parse_requirements_lock(lock.read_text())
    have = wheel_files(locked, p.wheelhouse)
    if len(have) < len(locked):
        missing = [w.name for w in locked if w.name not in have]
        log(
            f"wheelhouse: downloading {len(missing)} locked wheels ({', '.join(missing[:6])}{'...' if len(missing) > 6 else ''})"
        )
        p.wheelhouse.mkdir(parents=True, exist_ok=True)
        proc = subprocess.run(
            _pip(
                "download",
                "--no-deps",
                "--only-binary=:all:",
                "--require-hashes",
                "-d",
                str(p.wheelhouse),
                "-r",
                str(lock),
            ),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        if proc.returncode:
            raise ImageBuildError(
                "downloading the locked wheels failed (is PyPI reachable? did the lock go stale? "
                f"`scripts/lock-wheels` relocks):\n{proc.stderr.strip()[-2000:]}"
            )
        have = wheel_files(locked, p.wheelhouse)
        if len(have) < len(locked):
            raise ImageBuildError(f"wheelhouse still lacks {sorted(set(w.name for w in locked) - set(have))}")
    return have


def _tree_digest(root: Path, patterns: tuple[str, ...]) -> str:
    h = hashlib.sha256()
    for pat in patterns:
        for f in sorted(root.glob(pat)):
            if f.is_file() and "__pycache__" not in f.parts:
                h.update(str(f.relative_to(root)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def build_envreg_wheel(p: Paths | None = None) -> Path:
    """`pip wheel --no-deps .` on the host, reproducibly (fixed SOURCE_DATE_EPOCH) and only when the source
    changed; returns the wheel path under .cache/wheelhouse/envreg/."""
    p = p or paths()
    if not p.checkout:
        return installed_wheel(p.wheelhouse / "envreg")
    key = _tree_digest(
        p.root, ("pyproject.toml", "setup.py", "envreg/**/*.py", "envreg/**/*.json", "envreg/**/*.typed")
    )[:16]
    out = p.wheelhouse / "envreg"
    stamp = out / "source.sha256"
    wheels = sorted(out.glob("envreg-*.whl"))
    if stamp.is_file() and stamp.read_text().strip() == key and len(wheels) == 1:
        return wheels[0]
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    log("building the envreg wheel")
    with tempfile.TemporaryDirectory() as tmp:
        # build from a clean copy so that build/ and egg-info leftovers never leak in
        src = Path(tmp) / "src"
        shutil.copytree(
            p.root,
            src,
            ignore=shutil.ignore_patterns(
                ".git",
                ".venv",
                ".cache",
                "images",
                "manifests",
                "tests",
                "bench",
                "build",
                "dist",
                "*.egg-info",
                "__pycache__",
                ".pytest_cache",
                ".ruff_cache",
                "node_modules",
            ),
        )
        env = {**os.environ, "SOURCE_DATE_EPOCH": "315532800"}
        proc = subprocess.run(
            _pip("wheel", "--no-deps", "-w", str(out), str(src)),
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
    if proc.returncode:
        raise ImageBuildError(f"pip wheel of envreg failed:\n{proc.stderr.strip()[-2000:]}")
    stamp.write_text(key + "\n")
    return sorted(out.glob("envreg-*.whl"))[0]


WHEEL_EPOCH = (1980, 1, 1, 0, 0, 0)


def installed_wheel(out: Path) -> Path:
    """The installed envreg distribution packed back into a wheel (its own files, as RECORD lists them,
    without the catalog and bytecode), for images built outside a checkout; rewritten only when the
    installed files changed."""
    import base64
    import importlib.metadata
    import zipfile

    dist = importlib.metadata.distribution("envreg")
    files = {}
    for entry in dist.files or ():
        path = Path(str(dist.locate_file(entry)))
        rel = entry.as_posix()
        installer_files = ("RECORD", "INSTALLER", "REQUESTED", "direct_url.json")
        skip = (
            rel.startswith("envreg/_catalog/")
            or "__pycache__" in rel
            or rel.endswith((".pyc", *installer_files))
        )
        if not skip and (rel.startswith("envreg/") or ".dist-info/" in rel) and path.is_file():
            files[rel] = path.read_bytes()
    if not any(rel.startswith("envreg/") for rel in files):
        raise ImageBuildError(f"the installed envreg at {dist.locate_file('')} lists no package files")
    key = hashlib.sha256(
        b"".join(r.encode() + b"\0" + hashlib.sha256(d).digest() for r, d in sorted(files.items()))
    )
    wheel = out / f"envreg-{dist.version}-py3-none-any.whl"
    stamp = out / "source.sha256"
    if wheel.is_file() and stamp.is_file() and stamp.read_text().strip() == key.hexdigest()[:16]:
        return wheel
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    info = next(rel.split("/", 1)[0] for rel in files if ".dist-info/" in rel)
    record = []
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as zf:
        for rel, data in sorted(files.items()):
            zf.writestr(zipfile.ZipInfo(rel, WHEEL_EPOCH), data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append(f"{rel},sha256={digest},{len(data)}")
        record.append(f"{info}/RECORD,,")
        zf.writestr(zipfile.ZipInfo(f"{info}/RECORD", WHEEL_EPOCH), "\n".join(record) + "\n")
    stamp.write_text(key.hexdigest()[:16] + "\n")
    log(f"packed the installed envreg {dist.version} into {wheel.name}")
    return wheel
