"""`envreg reward serve`: a batched HTTP scoring endpoint (FastAPI, OpenAPI document, bearer token).

``POST /v1/score`` takes up to `max_batch` items (record + raw model output) and answers one
breakdown (or error) per item, in order. Evaluations run at most `concurrency` at once across all
requests; sandboxes come from the runtime's warm pools and are reused between evaluations.
Every route, ``/openapi.json`` included, needs ``Authorization: Bearer <token>``. Records may name only
the environments of the server's catalog (its ``--env`` sources, the catalog's folders on the local
tier, the local index's images on Docker tiers): any other name, a path included, is refused per item
and nothing of it is imported. A request body over `max_body` bytes gets 413. No error, of a request or of
an item, names a path of the host (`envreg.errors.public_text`).
"""

from __future__ import annotations

import hmac
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Receive, Scope, Send

from envreg.host_paths import public_text
from envreg.http.asgi import BodyTooLarge, read_body, replay, send_json
from envreg.reward.batch import ItemResult, ScoreItem, score_items
from envreg.reward.score import ScoreOptions, Scorer
from envreg.runtime import Runtime


@dataclass
class RewardServerConfig:
    token: str
    isolation: str = "local"
    concurrency: int = 16
    max_batch: int = 1024
    pool: dict[str, int] = field(default_factory=dict)
    options: ScoreOptions = field(default_factory=ScoreOptions)
    sources: dict[str, str] = field(default_factory=dict)
    max_body: int = 16 << 20
    """Largest request body in bytes (413 beyond)."""


def catalog(config: RewardServerConfig) -> dict[str, str]:
    """The environments records may name: the catalog's folders (local tier) or the local index's images
    (Docker tiers), then the configured sources, which win."""
    from envreg.config import images_root
    from envreg.env.loader import known_names

    if config.isolation == "local":
        found = {name: str(images_root() / name) for name in known_names()}
    else:
        from envreg.registry.index import default_index

        found = {record.name: record.name for record in default_index().list()}
    return {**found, **config.sources}


CATALOG_HINT = "name one of those, or restart the server with --env NAME=FOLDER"


class BodyLimit:
    """ASGI middleware: a request body over `limit` bytes gets 413 before the app reads it."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        try:
            body = await read_body(scope, receive, self.limit)
        except BodyTooLarge:
            error = f"request body over this server's limit of {self.limit:,} bytes: send smaller batches"
            await send_json(send, 413, {"error": error})
            return
        await self.app(scope, replay(body, receive), send)


class ScoreRequest(BaseModel):
    items: list[ScoreItem] = Field(description="What to score; answered in the same order.")
    oracle: bool = Field(default=False, description="Score each record's own calls (checks the records).")


class ScoreResponse(BaseModel):
    results: list[ItemResult]
    seconds: float = Field(description="Wall time of the batch on the server.")


class Health(BaseModel):
    status: str = "ok"
    isolation: str
    concurrency: int
    max_batch: int
    in_flight: int
    scored: int


class Error(BaseModel):
    error: str


async def serve(config: RewardServerConfig, host: str, port: int, ready: Any = None) -> None:
    """Serve until cancelled or SIGINT / SIGTERM; `ready(url)` is called once the port is bound."""
    import uvicorn

    from envreg.server.listen import listen

    sock = listen(host, port)  # `CannotListen` naming the address when it is taken
    sock.setblocking(False)
    app = create_app(config)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on"))
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: server.serve(sockets=[sock]))
        while not server.started:
            if server.should_exit:
                return
            await anyio.sleep(0.01)
        bound = server.servers[0].sockets[0].getsockname()[1]
        if ready is not None:
            ready(f"http://{host}:{bound}")


def create_app(config: RewardServerConfig, runtime: Runtime | None = None) -> FastAPI:
    """The scoring app; it enters its own `Runtime` in its lifespan unless one is given."""
    state: dict[str, Any] = {"scored": 0}
    sources = catalog(config)
    limiter = anyio.CapacityLimiter(max(1, config.concurrency))

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if runtime is not None:
            state["scorer"] = Scorer(
                runtime,
                isolation=config.isolation,
                options=config.options,
                sources=sources,
                only_sources=CATALOG_HINT,
            )
            yield
            return
        async with Runtime(pool=config.pool) as rt:
            state["scorer"] = Scorer(
                rt,
                isolation=config.isolation,
                options=config.options,
                sources=sources,
                only_sources=CATALOG_HINT,
            )
            yield
            await state["scorer"].close()

    app = FastAPI(
        title="envreg reward",
        version="1",
        description=__doc__,  # pyright: ignore[reportArgumentType]
        lifespan=lifespan,
        openapi_url=None,
        docs_url=None,
        redoc_url=None,
    )
    app.add_middleware(BodyLimit, limit=config.max_body)
    bearer = HTTPBearer(auto_error=False, description="The token printed by `envreg reward serve`.")
    expected = config.token.encode()

    def authorized(credentials: HTTPAuthorizationCredentials | None = Depends(bearer)) -> None:  # noqa: B008
        given = (credentials.credentials if credentials else "").encode()
        if not credentials or not hmac.compare_digest(given, expected):
            raise HTTPException(401, "missing or wrong bearer token", headers={"WWW-Authenticate": "Bearer"})

    auth = [Depends(authorized)]
    errors = {
        400: {
            "model": Error,
            "description": "Bad input (the whole request); bad items are answered per item.",
        },
        401: {"model": Error, "description": "Missing or wrong token."},
        413: {
            "model": Error,
            "description": "More items than the batch limit, or a body over the size limit.",
        },
    }

    @app.exception_handler(HTTPException)
    async def http_error(_: Request, exc: HTTPException) -> JSONResponse:
        error = public_text(str(exc.detail))
        return JSONResponse({"error": error}, status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def bad_request(_: Request, exc: RequestValidationError) -> JSONResponse:
        where = "; ".join(
            f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg', '')}" for e in exc.errors()[:5]
        )
        return JSONResponse({"error": f"invalid request: {where}"}, status_code=400)

    @app.get("/openapi.json", include_in_schema=False, dependencies=auth)
    async def openapi() -> JSONResponse:
        return JSONResponse(app.openapi())

    @app.get("/v1/healthz", response_model=Health, dependencies=auth, responses=errors)  # pyright: ignore[reportArgumentType]
    async def healthz() -> Health:
        return Health(
            isolation=config.isolation,
            concurrency=config.concurrency,
            max_batch=config.max_batch,
            in_flight=int(limiter.borrowed_tokens),
            scored=state["scored"],
        )

    @app.post("/v1/score", response_model=ScoreResponse, dependencies=auth, responses=errors)  # pyright: ignore[reportArgumentType]
    async def score(body: ScoreRequest) -> Response:
        """Score a batch: one result (or error) per item, in order."""
        if len(body.items) > config.max_batch:
            raise HTTPException(
                413, f"{len(body.items)} items; this server takes at most {config.max_batch} per request"
            )
        started = time.perf_counter()

        def done(_: ItemResult) -> None:
            state["scored"] += 1

        results = await score_items(state["scorer"], body.items, limiter, oracle=body.oracle, on_done=done)
        for result in results:  # an item's error may name the catalog's folders: never the host's paths
            if result.error is not None:
                result.error = public_text(result.error)
        body_out = ScoreResponse(results=results, seconds=time.perf_counter() - started)
        return Response(body_out.model_dump_json(), media_type="application/json")  # no re-validation

    return app
