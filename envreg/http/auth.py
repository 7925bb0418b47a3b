"""Bearer tokens (RFC 6750): read from ``Authorization``, compared in constant time."""

from __future__ import annotations

import hmac

from starlette.types import Scope


def bearer_token(scope: Scope) -> bytes | None:
    """The token of the request's ``Authorization: Bearer <token>`` header."""
    return parse_bearer(next((v for k, v in scope["headers"] if k == b"authorization"), None))


def parse_bearer(authorization: bytes | None) -> bytes | None:
    """The token of an ``Authorization`` value ``Bearer <token>`` (the scheme is case-insensitive, RFC 7235)."""
    if authorization is None:
        return None
    scheme, _, token = authorization.strip().partition(b" ")
    return token.strip() if scheme.lower() == b"bearer" and token.strip() else None


def bearer_matches(scope: Scope, expected: str) -> bool:
    """Whether the request carries exactly the bearer token `expected` (compared in constant time)."""
    return tokens_match(bearer_token(scope), expected)


def tokens_match(given: bytes | str | None, expected: str) -> bool:
    """Whether `given` is `expected` (constant time; None and an empty expected token never match)."""
    if given is None or not expected:
        return False
    raw = given.encode() if isinstance(given, str) else given
    return hmac.compare_digest(raw, expected.encode())
