"""Errors the runtime raises, the same on every isolation tier."""

from __future__ import annotations

from typing import Any


class InvalidState(ValueError):
    """A state the environment refuses; nothing was changed. `errors` lists each problem."""

    def __init__(self, message: str, errors: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.errors = errors or []


class SandboxGone(RuntimeError):
    """The sandbox ended: closed, its lease expired, or its container died."""


class EngineError(RuntimeError):
    """The Docker engine refused or failed an operation."""


class ImageNotFound(EngineError, LookupError):
    """No local image for an environment reference: build or pull it."""
