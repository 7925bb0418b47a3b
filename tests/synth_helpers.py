"""Shared by the synthesis tests: the catalog's tool graph, built once per test process with the
real default embedding model (embeddings cached under .cache/ by content digest)."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from envreg.manifest import Manifest
from envreg.synth.embed import make_embedder
from envreg.synth.graph import ToolGraph, build_graph, load_manifests

ROOT = Path(__file__).resolve().parent.parent
MANIFESTS = ROOT / "manifests"
CACHE = ROOT / ".cache"


@cache
def catalog_manifests() -> tuple[Manifest, ...]:
    return tuple(load_manifests(MANIFESTS))


@cache
def catalog_graph() -> ToolGraph:
    return build_graph(catalog_manifests(), make_embedder(cache_dir=CACHE))


def manifests_by_name() -> dict[str, Manifest]:
    return {m.name: m for m in catalog_manifests()}
