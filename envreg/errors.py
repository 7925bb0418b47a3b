"""One error tree: every failure a user can act on is an `EnvregError` with an HTTP status and a hint.

`str(exc)` says what went wrong, `exc.hint` what to do about it, `exc.status` how the daemon (and any
HTTP front) reports it. The daemon maps the whole tree in one handler; the CLI prints message and hint.
Errors a *tool* raises for the agent (`envreg.env.ToolError`) are not part of it: they are tool results.
"""

from __future__ import annotations

from typing import Any, ClassVar


class EnvregError(Exception):
    """Root of envreg's errors: a message, an optional hint, and the HTTP status that reports it."""

    status: ClassVar[int] = 500

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message}; {self.hint}" if self.hint else self.message

    def to_json(self) -> dict[str, Any]:
        """The error body every HTTP front returns: ``{"error": message; hint, "hint": hint}``, with the
        host's paths named from neutral roots (`public_text`)."""
        from envreg.host_paths import public_text

        body: dict[str, Any] = {"error": public_text(str(self))}
        if self.hint:
            body["hint"] = public_text(self.hint)
        return body


class BadRequest(EnvregError, ValueError):
    """Input that can never work (a malformed reference or id, a disabled option)."""

    status = 400


class NotFound(EnvregError, LookupError):
    """Something asked for by name or id that does not exist (or no longer does)."""

    status = 404


class Conflict(EnvregError):
    """The request contradicts what exists (another environment's snapshot, a taken name)."""

    status = 409


class TooLarge(EnvregError):
    """A body, argument or state over a configured limit."""

    status = 413


class LimitReached(EnvregError):
    """A capacity limit (sandboxes, instances) is full; retry after releasing some."""

    status = 429


class InvalidState(EnvregError, ValueError):
    """A state the environment refuses; nothing was changed. `errors` lists each problem."""

    status = 422

    def __init__(self, message: str, errors: list[dict[str, Any]] | None = None, hint: str | None = None):
        super().__init__(message, hint)
        self.errors = errors or []

    def to_json(self) -> dict[str, Any]:
        return {**super().to_json(), "errors": self.errors}


class EnvironmentNotFound(NotFound):
    """No environment folder or image matches the reference."""


class UnknownToolError(NotFound):
    """The named tool does not exist in this environment (a protocol error, not a tool result)."""

    def __init__(self, name: str, known: list[str]) -> None:
        listed = f"; this environment has: {', '.join(known)}" if known else ""
        super().__init__(f"Unknown tool: {name!r}{listed}")
        self.name = name


class SandboxGone(NotFound):
    """The sandbox ended: closed, its lease expired, or its server died."""


class SnapshotNotFound(NotFound):
    """No snapshot with that id (or prefix) in the store."""


class SnapshotMismatch(Conflict):
    """A snapshot was offered to an environment it was not taken from."""


class SnapshotCorrupt(EnvregError):
    """A stored snapshot whose content does not match its address: it was altered or damaged."""

    status = 422


class UpstreamError(EnvregError):
    """An environment server failed or did not answer."""

    status = 502


class UpstreamTimeout(UpstreamError):
    """An environment server did not answer in time."""

    status = 504


class UpstreamConnectTimeout(UpstreamTimeout):
    """No connection to an environment server could be made in time; nothing was sent."""


class UpstreamDropped(UpstreamError):
    """The connection to an environment server was refused or reset: its process may have just died."""


class EngineError(EnvregError):
    """The sandbox backend (the Docker engine, a Ray cluster) refused or failed an operation."""

    status = 503


class ImageNotFound(EngineError, LookupError):
    """No local image for an environment reference: build or pull it."""

    status = 404


class VerificationError(EnvregError):
    """Content that does not match what was asked for or what its metadata declares; nothing was recorded."""

    status = 409


class ForeignCode(EnvregError):
    """Foreign code (an imported tool file) asked to run on the host: envreg runs it only in a container sandbox."""

    status = 403


class AuthError(EnvregError):
    """Missing or refused credentials."""

    status = 401


__all__ = [
    "AuthError",
    "BadRequest",
    "Conflict",
    "EngineError",
    "EnvironmentNotFound",
    "EnvregError",
    "ForeignCode",
    "ImageNotFound",
    "InvalidState",
    "LimitReached",
    "NotFound",
    "SandboxGone",
    "SnapshotCorrupt",
    "SnapshotMismatch",
    "SnapshotNotFound",
    "TooLarge",
    "UnknownToolError",
    "UpstreamError",
    "UpstreamTimeout",
    "VerificationError",
]
