"""Errors of the registry layer, in envreg's one error tree (`envreg.errors`): a message that says what went
wrong, a hint that says what to do, and the HTTP status the daemon reports them with."""

from __future__ import annotations

from envreg.errors import AuthError, EnvregError, NotFound, VerificationError

RegistryError = EnvregError
"""A registry or engine failure with no more specific kind (reported as 500)."""

__all__ = ["AuthError", "NotFound", "RegistryError", "VerificationError"]
