"""References to environments: `name`, `name:version`, `name@sha256:...`, optionally behind a registry."""

from __future__ import annotations

import re
from dataclasses import dataclass

from envreg import config
from envreg.config import image_prefix

DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
NAME_RE = re.compile(r"^[a-z0-9]+(?:[._-][a-z0-9]+)*$")
DEFAULT_NAMESPACE = "envreg"


def default_registry(registry: str | None) -> str | None:
    """The registry given, else `$ENVREG_REGISTRY`, else None."""
    return registry or config.default_registry()


def local_repo(name: str) -> str:
    return f"{image_prefix()}{name}"


def local_tag(name: str, version: str) -> str:
    return f"{local_repo(name)}:{version}"


def is_digest(text: str) -> bool:
    return bool(DIGEST_RE.match(text))


def short(digest: str | None, n: int = 12) -> str:
    return (digest or "").removeprefix("sha256:")[:n]


@dataclass(frozen=True)
class EnvRef:
    """`name[:version][@sha256:...]`; `version` None means newest, `digest` pins one image."""

    name: str
    version: str | None = None
    digest: str | None = None

    @classmethod
    def parse(cls, text: str) -> EnvRef:
        raw = text.strip()
        digest = None
        if "@" in raw:
            raw, digest = raw.split("@", 1)
            if not is_digest(digest):
                raise ValueError(f"{text!r}: the digest must be sha256:<64 hex digits>")
        name, version = raw, None
        if ":" in raw:
            name, version = raw.rsplit(":", 1)
            if not version:
                raise ValueError(f"{text!r}: empty version after ':'")
        if "/" in name:  # envreg/calendar -> calendar (the local repository form)
            name = name.rsplit("/", 1)[1]
        if not NAME_RE.match(name):
            raise ValueError(
                f"{text!r}: {name!r} is not an environment name (lowercase letters, digits, . _ -)"
            )
        return cls(name, version, digest)

    def __str__(self) -> str:
        out = self.name
        if self.version:
            out += f":{self.version}"
        if self.digest:
            out += f"@{self.digest}"
        return out


@dataclass(frozen=True)
class RemoteRef:
    """A repository in a registry: `host[:port]/path` plus a tag or a manifest digest."""

    registry: str
    repository: str
    tag: str | None = None
    digest: str | None = None

    @property
    def repo(self) -> str:
        """`host:port/path`, the form the engine uses."""
        return f"{self.registry}/{self.repository}"

    @property
    def reference(self) -> str:
        return self.digest or self.tag or "latest"

    def pinned(self) -> str:
        """The engine reference: by digest when known."""
        if self.digest:
            return f"{self.repo}@{self.digest}"
        return f"{self.repo}:{self.tag or 'latest'}"

    def __str__(self) -> str:
        return self.pinned()


def normalize_registry(registry: str) -> str:
    """`http://127.0.0.1:5000/` -> `127.0.0.1:5000`."""
    reg = registry.strip().rstrip("/")
    for scheme in ("http://", "https://"):
        reg = reg.removeprefix(scheme)
    if not reg or "/" in reg:
        raise ValueError(f"{registry!r} is not a registry host (HOST[:PORT])")
    return reg


def remote_for(ref: EnvRef, registry: str, namespace: str = DEFAULT_NAMESPACE) -> RemoteRef:
    """Where an environment lives in a registry: `<registry>/<namespace>/<name>`."""
    repo = f"{namespace.strip('/')}/{ref.name}" if namespace else ref.name
    return RemoteRef(normalize_registry(registry), repo, ref.version, ref.digest)


def parse_remote(text: str) -> RemoteRef | None:
    """A fully qualified reference `host[:port]/repo[:tag][@digest]`, or None when `text` has no registry host."""
    if "/" not in text:
        return None
    host, rest = text.split("/", 1)
    if not ("." in host or ":" in host or host == "localhost"):
        return None
    digest = None
    if "@" in rest:
        rest, digest = rest.split("@", 1)
        if not is_digest(digest):
            raise ValueError(f"{text!r}: the digest must be sha256:<64 hex digits>")
    tag = None
    last = rest.rsplit("/", 1)[-1]
    if ":" in last:
        rest, tag = rest.rsplit(":", 1)
    return RemoteRef(host, rest, tag, digest)


def version_key(version: str) -> tuple:
    """Sort key for versions: numeric parts numerically, pre-releases (`1.0.0-rc1`) before releases."""
    main, _, pre = version.partition("-")
    parts = tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.split(r"[.+]", main))
    return (parts, 0 if pre else 1, pre)
