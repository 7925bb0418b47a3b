"""Search: environments by name, description or tool, in the local index, the committed manifests (the
catalog: what `envreg build` would build) and a registry's metadata (the registry's HTTP API only: nothing
pulled), and the manifest of a registry image without pulling it."""

from __future__ import annotations

import contextlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envreg.config import envreg_home
from envreg.manifest import Manifest
from envreg.protocol import MANIFEST_DIGEST_LABEL, NAME_LABEL, TOOLS_LABEL, VERSION_LABEL
from envreg.registry.client import Credentials, RegistryClient, RemoteImage
from envreg.registry.errors import RegistryError
from envreg.registry.index import LocalIndex
from envreg.registry.refs import default_registry, normalize_registry


@dataclass
class SearchHit:
    name: str
    version: str
    description: str
    where: str  # "local", "catalog" (a committed manifest, not built here) or the registry repository ("host/repo")
    matched: list[str]  # "name", "description", "tool:<name>"
    tools: list[str] = field(default_factory=list)
    image_id: str | None = None
    manifest_digest: str | None = None
    repo_digest: str | None = None  # "host/repo@sha256:..." for registry hits

    def to_json(self) -> dict[str, Any]:
        return self.__dict__.copy()


def _match(
    text: str, name: str, description: str, tools: list[str], tool_descriptions: list[str]
) -> list[str]:
    t = text.lower()
    out = []
    if t in name.lower():
        out.append("name")
    if t in description.lower():
        out.append("description")
    out += [f"tool:{n}" for n in tools if t in n.lower()]
    if not any(m.startswith("tool:") for m in out):
        out += [
            f"tool-description:{n}" for n, d in zip(tools, tool_descriptions, strict=False) if t in d.lower()
        ]
    return out


def _numeric(version: str) -> list[int]:
    return [int(p) for p in version.replace("-", ".").split(".") if p.isdigit()]


def _manifest_cache(digest: str) -> Path:

    return envreg_home() / "cache" / "manifests" / f"{digest.replace(':', '-')}.json"


def _cached_manifest(digest: str, index: LocalIndex) -> Manifest | None:
    for rec in index.list():
        if rec.manifest_digest == digest:
            return rec.load_manifest()
    path = _manifest_cache(digest)
    if path.is_file():
        with contextlib.suppress(ValueError):
            m = Manifest.loads(path.read_text())
            m.verify()
            if m.digest == digest:
                return m
    return None


def catalog_manifests(folder: Path | None = None) -> list[Manifest]:
    """The committed manifests (`folder`, default `envreg.config.manifests_root`) that verify, by name."""
    from envreg.config import manifests_root

    found = []
    for path in sorted((folder or manifests_root()).glob("*.json")):
        with contextlib.suppress(ValueError, OSError):
            m = Manifest.loads(path.read_text())
            m.verify()
            found.append(m)
    return found


def catalog_manifest(name: str, version: str | None = None, folder: Path | None = None) -> Manifest | None:
    """The committed manifest of `name` (at `version`, when given), or None."""
    for m in catalog_manifests(folder):
        if m.name == name and version in (None, m.version):
            return m
    return None


def remote_manifest(rc: RegistryClient, img: RemoteImage, index: LocalIndex) -> Manifest | None:
    """The environment manifest of a registry image, without pulling it: the local index, the cache, or the
    small top layer that holds `/env/manifest.json` (verified against the label before it is believed)."""
    digest = img.labels.get(MANIFEST_DIGEST_LABEL)
    if not digest:
        return None
    cached = _cached_manifest(digest, index)
    if cached:
        return cached
    raw = rc.find_file(img.repository, img.layers, "/env/manifest.json")
    if raw is None:
        return None
    try:
        m = Manifest.loads(raw)
        m.verify()
    except ValueError:
        return None
    if m.digest != digest:
        return None
    path = _manifest_cache(digest)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(m.dumps())
    return m


def remote_images(
    registry: str,
    *,
    namespace: str | None = None,
    credentials: Credentials | bool | None = True,
    workers: int = 16,
) -> tuple[RegistryClient, list[RemoteImage]]:
    """Every envreg environment image in a registry (one per manifest digest), from metadata alone."""
    rc = RegistryClient(normalize_registry(registry), credentials)
    repos = rc.catalog()
    if namespace:
        repos = [r for r in repos if r.startswith(namespace.strip("/") + "/")]

    def per_repo(repo: str) -> list[RemoteImage]:
        seen: dict[str, RemoteImage] = {}
        for t in rc.tags(repo):
            try:
                img = rc.image(repo, t)
            except RegistryError:
                continue
            if img.digest in seen:
                seen[img.digest].tags.append(t)
                continue
            img.tags.append(t)
            seen[img.digest] = img
        return [i for i in seen.values() if i.labels.get(NAME_LABEL)]

    with ThreadPoolExecutor(max_workers=workers) as pool:
        found = [img for imgs in pool.map(per_repo, repos) for img in imgs]
    return rc, found


def search(
    text: str,
    registry: str | None = None,
    *,
    namespace: str | None = None,
    index: LocalIndex | None = None,
    credentials: Credentials | bool | None = True,
    workers: int = 16,
    manifests: Path | None = None,
) -> list[SearchHit]:
    """Environments whose name, description or tool names contain `text`, in the local index and (when given)
    a registry; then, for environments neither has, the committed manifests (`manifests`, default
    `envreg.config.manifests_root`; `where="catalog"`: not built or pulled here). Registry images are read
    through the HTTP API only (nothing pulled)."""
    index = index or LocalIndex()
    hits: list[SearchHit] = []
    for rec in index.list():
        m = rec.load_manifest()
        tools = [t.name for t in m.tools]
        matched = _match(text, m.name, m.description, tools, [t.description for t in m.tools])
        if matched:
            hits.append(
                SearchHit(
                    m.name,
                    m.version,
                    m.description,
                    "local",
                    matched,
                    tools,
                    rec.image_id,
                    rec.manifest_digest,
                    rec.repo_digest,
                )
            )
    registry = default_registry(registry)
    if registry:
        rc, images = remote_images(registry, namespace=namespace, credentials=credentials, workers=workers)
        with rc:

            def one(img: RemoteImage) -> SearchHit | None:
                labels = img.labels
                name, version = labels[NAME_LABEL], labels.get(VERSION_LABEL, "?")
                desc = labels.get("org.opencontainers.image.description", "")
                tool_descs: list[str] = []
                if labels.get(TOOLS_LABEL):
                    tools = [t for t in labels[TOOLS_LABEL].split(",") if t]
                else:
                    m = remote_manifest(rc, img, index)
                    tools = [t.name for t in m.tools] if m else []
                    tool_descs = [t.description for t in m.tools] if m else []
                    desc = desc or (m.description if m else "")
                matched = _match(text, name, desc, tools, tool_descs)
                if not matched:
                    return None
                return SearchHit(
                    name,
                    version,
                    desc,
                    f"{rc.registry}/{img.repository}",
                    matched,
                    tools,
                    img.config_digest,
                    labels.get(MANIFEST_DIGEST_LABEL),
                    f"{rc.registry}/{img.repository}@{img.digest}",
                )

            with ThreadPoolExecutor(max_workers=workers) as pool:
                hits += [h for h in pool.map(one, images) if h]
    found = {h.name for h in hits}
    for m in catalog_manifests(manifests):
        tools = [t.name for t in m.tools]
        matched = _match(text, m.name, m.description, tools, [t.description for t in m.tools])
        if matched and m.name not in found:
            hits.append(
                SearchHit(m.name, m.version, m.description, "catalog", matched, tools, None, m.digest)
            )
    order = {"local": 0, "catalog": 1}
    hits.sort(key=lambda h: (h.name, order.get(h.where, 2), h.where, [-p for p in _numeric(h.version)]))
    return hits
