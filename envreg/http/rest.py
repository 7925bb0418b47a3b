"""What the FastAPI fronts (the daemon's control API, the reward server) share: the bearer-token dependency
and the exception handlers that answer every error as ``{"error": message}`` (`envreg.http.errors`).

Each front keeps its handlers at module level and its own objects on ``app.state``; these parts read only
the request, so one front's routes never close over another's settings.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import Depends, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.exceptions import HTTPException

from envreg.http.auth import tokens_match
from envreg.http.errors import error_json


def bearer_auth(
    token_of: Callable[[Request], str], *, description: str, refusal: str, realm: str
) -> Callable:
    """A FastAPI dependency: 401 with `refusal` unless the request carries the bearer token that `token_of`
    reads off it (constant-time comparison; `description` documents the scheme in the OpenAPI document)."""
    scheme = HTTPBearer(auto_error=False, description=description)

    def authorized(
        request: Request,
        credentials: HTTPAuthorizationCredentials | None = Depends(scheme),  # noqa: B008 (a closure's local)
    ) -> None:
        if credentials is None or not tokens_match(credentials.credentials, token_of(request)):
            raise HTTPException(401, refusal, headers={"WWW-Authenticate": f'Bearer realm="{realm}"'})

    return authorized


def invalid_request(exc: RequestValidationError) -> tuple[str, list[dict[str, Any]]]:
    """What a request that failed validation says (its first five problems), and every problem."""
    errors = [{k: v for k, v in e.items() if k != "url"} for e in exc.errors()]
    where = "; ".join(f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg', '')}" for e in errors[:5])
    return f"invalid request: {where}", errors


async def http_error(_: Request, exc: Exception) -> JSONResponse:
    """Starlette's and our `HTTPException`s: their status and headers, ``{"error": detail}``."""
    assert isinstance(exc, HTTPException)
    return JSONResponse(error_json(str(exc.detail)), status_code=exc.status_code, headers=exc.headers)


async def internal_error(_: Request, exc: Exception) -> JSONResponse:
    """A bug: what went wrong, as a 500, without the host's paths (an OSError's file, a traceback's frames)."""
    return JSONResponse(error_json(f"internal error: {type(exc).__name__}: {exc}"), status_code=500)
