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

import contextlib
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any

import anyio
from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException

from envreg.host_paths import public_text
from envreg.http.asgi import BodyLimit
from envreg.http.errors import error_json
from envreg.http.rest import bearer_auth, http_error, internal_error, invalid_request
from envreg.reward.batch import ItemResult, ScoreItem, score_items
from envreg.reward.score import ScoreOptions, Scorer
from envreg.runtime import Runtime

if TYPE_CHECKING:
    from envreg.http.serving import SignalStop


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


async def serve(
    config: RewardServerConfig, host: str, port: int, ready: Any = None, stop: SignalStop | None = None
) -> None:
    """Serve until cancelled, or until `stop` (the process's SIGINT / SIGTERM) stops it; `ready(url)` is
    called once the port is bound."""
    import uvicorn

    from envreg.http.serving import QuietServer
    from envreg.server.listen import listen

    sock = listen(host, port)  # `CannotListen` naming the address when it is taken
    sock.setblocking(False)
    app = create_app(config)
    server = QuietServer(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on"))
    if stop is not None:
        stop.add(server)
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: server.serve(sockets=[sock]))
        while not server.started:
            if server.should_exit:
                return
            await anyio.sleep(0.01)
        bound = server.servers[0].sockets[0].getsockname()[1]
        if ready is not None:
            ready(f"http://{host}:{bound}")


@dataclass
class Scoring:
    """What the routes work on (`request.app.state.scoring`): the config, the scorer once the app's lifespan
    made it, the limit on evaluations in flight, and how many items were scored."""

    config: RewardServerConfig
    limiter: anyio.CapacityLimiter
    scorer: Scorer | None = None
    scored: int = 0


def scoring(request: Request) -> Scoring:
    return request.app.state.scoring


authorized = bearer_auth(
    lambda request: request.app.state.scoring.config.token,
    description="The token printed by `envreg reward serve`.",
    refusal="missing or wrong bearer token: send `Authorization: Bearer <token>` with the token "
    "`envreg reward serve` printed (or its --token)",
    realm="envreg reward",
)
router = APIRouter(dependencies=[Depends(authorized)])
"""Every route of the scoring app, each behind its token; every app `create_app` makes serves them."""
ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": Error, "description": "Bad input (the whole request); bad items are answered per item."},
    401: {"model": Error, "description": "Missing or wrong token."},
    413: {"model": Error, "description": "More items than the batch limit, or a body over the size limit."},
}


async def bad_request(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    return JSONResponse(error_json(invalid_request(exc)[0]), status_code=400)


def create_app(config: RewardServerConfig, runtime: Runtime | None = None) -> FastAPI:
    """The scoring app; it enters its own `Runtime` in its lifespan unless one is given."""
    state = Scoring(config, anyio.CapacityLimiter(max(1, config.concurrency)))
    sources = catalog(config)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        async with contextlib.AsyncExitStack() as stack:
            rt = (
                runtime if runtime is not None else await stack.enter_async_context(Runtime(pool=config.pool))
            )
            state.scorer = Scorer(
                rt,
                isolation=config.isolation,
                options=config.options,
                sources=sources,
                only_sources=CATALOG_HINT,
            )
            yield
            if runtime is None:
                await state.scorer.close()

    app = FastAPI(
        title="envreg reward",
        version="1",
        description=__doc__,  # pyright: ignore[reportArgumentType]
        lifespan=lifespan,
        openapi_url=None,
        docs_url=None,
        redoc_url=None,
        routes=router.routes,  # as they are: `include_router` defers them in newer FastAPI releases
        exception_handlers={
            HTTPException: http_error,
            RequestValidationError: bad_request,
            Exception: internal_error,
        },
    )
    app.state.scoring = state
    app.add_middleware(BodyLimit, limit=config.max_body, then="send smaller batches")
    return app


Ctx = Annotated[Scoring, Depends(scoring)]


@router.get("/openapi.json", include_in_schema=False)
async def openapi(request: Request) -> JSONResponse:
    return JSONResponse(request.app.openapi())


@router.get("/v1/healthz", response_model=Health, responses=ERRORS)
async def healthz(s: Ctx) -> Health:
    return Health(
        isolation=s.config.isolation,
        concurrency=s.config.concurrency,
        max_batch=s.config.max_batch,
        in_flight=int(s.limiter.borrowed_tokens),
        scored=s.scored,
    )


@router.post("/v1/score", response_model=ScoreResponse, responses=ERRORS)
async def score(s: Ctx, body: ScoreRequest) -> Response:
    """Score a batch: one result (or error) per item, in order."""
    max_batch = s.config.max_batch
    if len(body.items) > max_batch:
        raise HTTPException(
            413, f"{len(body.items)} items; this server takes at most {max_batch} per request"
        )
    assert s.scorer is not None, "the app's lifespan makes the scorer"
    started = time.perf_counter()

    def done(_: ItemResult) -> None:
        s.scored += 1

    results = await score_items(s.scorer, body.items, s.limiter, oracle=body.oracle, on_done=done)
    for result in results:  # an item's error may name the catalog's folders: never the host's paths
        if result.error is not None:
            result.error = public_text(result.error)
    body_out = ScoreResponse(results=results, seconds=time.perf_counter() - started)
    return Response(body_out.model_dump_json(), media_type="application/json")  # no re-validation
