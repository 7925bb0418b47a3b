"""Errors of the registry layer: a message that says what went wrong and a hint that says what to do."""

from __future__ import annotations


class RegistryError(RuntimeError):
    """A user-facing failure: `str(exc)` is the problem, `exc.hint` what to do about it."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint


class NotFound(RegistryError, LookupError):
    """An environment, tag or digest that is not where it was looked for."""


class VerificationError(RegistryError):
    """Content that does not match what was asked for or what its metadata declares; nothing was recorded."""


class AuthError(RegistryError):
    """The registry refused the credentials (or none were found)."""
