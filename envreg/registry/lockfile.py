"""`envreg.lock`: a suite of environments pinned by image ID and manifest digest (and registry digest)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from envreg.registry.errors import RegistryError, VerificationError
from envreg.registry.refs import is_digest

LOCK_VERSION = 1
DEFAULT_LOCKFILE = "envreg.lock"


@dataclass(frozen=True)
class LockEntry:
    name: str
    version: str
    image_id: str  # config digest: what must be on the host after `pull --locked`
    manifest_digest: str  # what the image's manifest must hash to
    repository: str | None = None  # "host[:port]/path" to pull from
    repo_digest: str | None = None  # the registry manifest digest ("sha256:..."), pulled by it, never by tag

    @property
    def ref(self) -> str:
        return f"{self.name}:{self.version}"

    @property
    def pull_ref(self) -> str | None:
        return f"{self.repository}@{self.repo_digest}" if self.repository and self.repo_digest else None

    def check(self) -> None:
        for key in ("image_id", "manifest_digest"):
            if not is_digest(getattr(self, key)):
                raise ValueError(f"{self.ref}: {key} is not a sha256 digest")
        if self.repo_digest is not None and not is_digest(self.repo_digest):
            raise ValueError(f"{self.ref}: repo_digest is not a sha256 digest")


@dataclass
class Lockfile:
    environments: list[LockEntry] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        envs = sorted(self.environments, key=lambda e: (e.name, e.version))
        return {
            "lock_version": LOCK_VERSION,
            "environments": [{k: v for k, v in asdict(e).items() if v is not None} for e in envs],
        }

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=2) + "\n"

    @classmethod
    def loads(cls, text: str, source: str = DEFAULT_LOCKFILE) -> Lockfile:
        try:
            data = json.loads(text)
            if data.get("lock_version") != LOCK_VERSION:
                raise ValueError(f"unsupported lock_version {data.get('lock_version')!r}")
            entries = [LockEntry(**e) for e in data["environments"]]
            for e in entries:
                e.check()
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise RegistryError(
                f"{source} is not a valid envreg lockfile ({exc})",
                "regenerate it with `envreg lock NAMES...`",
            ) from None
        return cls(entries)

    @classmethod
    def read(cls, path: Path | str) -> Lockfile:
        p = Path(path)
        if not p.is_file():
            raise RegistryError(f"no lockfile at {p}", "create one with `envreg lock NAMES...`")
        return cls.loads(p.read_text(), str(p))

    def write(self, path: Path | str) -> Path:
        p = Path(path)
        p.write_text(self.dumps())
        return p


def check_expected(
    expect: LockEntry,
    name: str | None,
    version: str | None,
    image_id: str,
    manifest_digest: str | None,
    what: str,
) -> None:
    """Refuse an image (`what`, for messages) that is not exactly what the lock entry pins."""
    if (name, version) != (expect.name, expect.version):
        raise VerificationError(f"{what} is {name}:{version}, but the lockfile pins {expect.ref}")
    if image_id != expect.image_id:
        raise VerificationError(
            f"{what}: image {image_id} is not the locked {expect.image_id} for {expect.ref}",
            "the registry no longer serves the locked image; re-lock on purpose with `envreg lock`",
        )
    if manifest_digest != expect.manifest_digest:
        raise VerificationError(
            f"{what}: manifest {manifest_digest} is not the locked {expect.manifest_digest} for {expect.ref}"
        )
