"""Shared by the `envreg validate` tests."""

from __future__ import annotations

from pathlib import Path

from conftest import ROOT

NPM_CACHE = ROOT / ".cache" / "npm"
"""The TypeScript validators' npm packages, installed once per checkout (not once per test's ENVREG_HOME)."""


def npm_cached_home(path: Path) -> Path:
    """A fresh ENVREG_HOME whose npm cache is the checkout's."""
    (path / "cache").mkdir(parents=True)
    NPM_CACHE.mkdir(parents=True, exist_ok=True)
    (path / "cache" / "npm").symlink_to(NPM_CACHE)
    return path
