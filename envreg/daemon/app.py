"""The daemon's ASGI app: the REST control API (FastAPI) and the MCP gateway on one port.

``/sandboxes/<id>/mcp`` goes to the runtime's `Gateway` (per-sandbox token), ``/ui`` to the web
console (`envreg.console`: the daemon token, kept in a cookie); everything else to the control API,
where every route, ``/openapi.json`` included, needs ``Authorization: Bearer <daemon token>``.

Status codes: 400 bad input (malformed body, a disabled tier, a state together with a snapshot),
401 missing or wrong token, 403 a browser origin not allowed (``--cors-origin``), 404 unknown or
ended sandbox, unknown snapshot, environment or tool, 409 a snapshot of another environment,
421 a Host that is not this daemon's (``--allow-host``), 422 an invalid state (``errors`` lists
each problem; nothing was changed), 429 the daemon's sandbox limit, 502 the environment server
failed, 503 the Docker engine is unavailable or failed, 504 a sandbox gave no answer in time.
Every error body is ``{"error": "..."}``, and names no path of the host: ``$ENVREG_HOME/snapshots``,
``images/<name>``, ``./<path>`` for the daemon's working directory (`envreg.errors.public_text`).
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import httpx2
from fastapi import APIRouter, Depends, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Receive, Scope, Send

from envreg.canonical import canonical_json, sha256_hex
from envreg.daemon import models as m
from envreg.errors import BadRequest, EnvregError, LimitReached, NotFound
from envreg.http.access import AccessGuard
from envreg.http.asgi import BodyTooLarge, read_body, replay, send_json
from envreg.http.errors import error_json
from envreg.http.fastpath import FastPath
from envreg.http.rest import bearer_auth, http_error, internal_error, invalid_request
from envreg.protocol import GATEWAY_PREFIX
from envreg.runtime import Runtime, Sandbox, Snapshot
from envreg.runtime.gateway import Gateway

LOCAL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
MAX_BODY = 16 << 20


@dataclass
class DaemonSettings:
    """What the control API enforces."""

    token: str
    max_sandboxes: int = 1024
    tiers: tuple[str, ...] = ("instance", "container")
    default_ttl: float | None = None
    max_body: int = MAX_BODY
    # Host values beyond loopback at this port (``name:port``, ``name:*``); browser origins (CORS)
    allowed_hosts: tuple[str, ...] = ()
    cors_origins: tuple[str, ...] = ()
    ui_data: tuple[Path, ...] = ()  # folders the console reads trajectories and reports from
    reserved: int = field(default=0, init=False)  # sandboxes being created right now

    @property
    def default_tier(self) -> str:
        return next(t for t in ("container", "instance", "local") if t in self.tiers)


MAX_ECHO = 200
"""Most characters of a refused input an error body repeats."""


def _jsonable(errors: list[Any]) -> list[dict[str, Any]]:
    return json.loads(json.dumps([_capped(e) for e in errors], default=str))


def _capped(error: Any) -> Any:
    """A validation error whose echoed `input` is at most `MAX_ECHO` characters of its JSON."""
    if not isinstance(error, dict) or "input" not in error:
        return error
    shown = json.dumps(error["input"], default=str)
    if len(shown) <= MAX_ECHO:
        return error
    return {**error, "input": f"{shown[:MAX_ECHO]}... ({len(shown):,} characters in all)"}


ERR = {"model": m.Error}
COMMON = {
    400: {**ERR, "description": "Bad input."},
    401: {**ERR, "description": "Missing or wrong token."},
    403: {**ERR, "description": "A browser Origin this daemon does not allow (`--cors-origin`)."},
    421: {**ERR, "description": "A Host that is not this daemon's (`--allow-host`)."},
}
NOT_FOUND = {404: {**ERR, "description": "Unknown or ended sandbox (or snapshot, environment, tool)."}}
MISMATCH = {409: {**ERR, "description": "The snapshot was taken from another environment."}}
INVALID = {422: {**ERR, "description": "Invalid state; nothing was changed. `errors` lists each problem."}}
ENGINE = {
    429: {**ERR, "description": "The daemon holds its maximum number of sandboxes."},
    502: {**ERR, "description": "The environment server failed."},
    503: {**ERR, "description": "The Docker engine is unavailable or failed."},
}
UPSTREAM = {502: ENGINE[502]}


@dataclass
class Daemon:
    """What the control API's handlers work on (`request.app.state.daemon`): the runtime and the settings,
    and the fast path of the gateway on the daemon's port once it serves (`envreg.daemon.serve`)."""

    rt: Runtime
    settings: DaemonSettings
    fast_path: FastPath | None = None

    def sandbox(self, sandbox_id: str) -> Sandbox:
        """A live sandbox, or `NotFound` saying why not."""
        sb = self.rt.get(sandbox_id)
        shown = sandbox_id if len(sandbox_id) <= 64 else f"{sandbox_id[:61]}..."
        if sb is None and (reason := self.rt.ended_reason(sandbox_id)):
            raise NotFound(f"sandbox {sandbox_id} has ended: {reason}")
        if sb is None:
            raise NotFound(f"no sandbox {shown!r}: it never existed or it has ended")
        if sb.ended is not None:
            raise NotFound(f"sandbox {sandbox_id} has ended: {sb.ended}")
        return sb

    def check_tier(self, isolation: str, env: str | None = None) -> None:
        tiers = self.settings.tiers
        if isolation not in tiers:
            raise BadRequest(
                f"isolation {isolation!r} is disabled on this daemon (enabled: {', '.join(tiers)})",
                f"start it with `envreg serve --tiers {','.join((*tiers, isolation))}`",
            )
        if isolation == "local" and env is not None and not LOCAL_NAME.match(env):
            raise NotFound(f"no local environment {env[:64]!r}: the local tier takes an environment name")

    def isolation(self, body: m.CreateSandbox | m.ForkBody) -> str:
        """The body's isolation, or this daemon's default tier when the body names none."""
        return body.isolation if "isolation" in body.model_fields_set else self.settings.default_tier

    @contextlib.contextmanager
    def reserve(self, n: int) -> Iterator[None]:
        """Hold `n` places under `max_sandboxes` while they are created (`LimitReached` when full)."""
        settings = self.settings
        held = len(self.rt.sandboxes) + settings.reserved
        if held + n > settings.max_sandboxes:
            raise LimitReached(
                f"this daemon holds {held} of at most {settings.max_sandboxes} sandboxes",
                "delete some or start it with a larger --max-sandboxes",
            )
        settings.reserved += n
        try:
            yield
        finally:
            settings.reserved -= n

    def ttl(self, ttl: float | None) -> float | None:
        return ttl or self.settings.default_ttl


def daemon(request: Request) -> Daemon:
    return request.app.state.daemon


authorized = bearer_auth(
    lambda request: request.app.state.daemon.settings.token,
    description="The daemon token (see $ENVREG_HOME/daemon.json).",
    refusal="missing or wrong daemon token: send `Authorization: Bearer <token>` with the token in "
    "$ENVREG_HOME/daemon.json (or the --token / $ENVREG_TOKEN the daemon was started with)",
    realm="envreg daemon",
)


def known_query(request: Request) -> None:
    """Unknown query parameters are a mistake worth reporting, not something to ignore."""
    route = request.scope.get("route")
    declared = {p.alias for p in route.dependant.query_params} if route is not None else set()
    unknown = sorted(set(request.query_params) - declared)
    if unknown:
        shown = ", ".join(repr(u[:40]) for u in unknown[:5])
        allowed = ", ".join(sorted(declared)) or "none"
        raise BadRequest(f"unknown query parameter(s) {shown}", f"this route takes: {allowed}")


Ctx = Annotated[Daemon, Depends(daemon)]
router = APIRouter(
    dependencies=[Depends(authorized), Depends(known_query)],
    generate_unique_id_function=lambda route: route.name,  # operationId: the handler's name
)
"""Every route of the control API, each behind the daemon token; every app `create_api` makes serves them."""


async def envreg_error(_: Request, exc: Exception) -> JSONResponse:
    """The one place envreg's error tree becomes HTTP: its status, message, hint (and problems, each echoing
    at most `MAX_ECHO` characters of what was refused)."""
    assert isinstance(exc, EnvregError)
    return JSONResponse(_jsonable([exc.to_json()])[0], status_code=exc.status)


async def bad_request(request: Request, exc: Exception) -> JSONResponse:
    """Bad input is a 400 here (never FastAPI's 422), with every problem under ``errors``."""
    assert isinstance(exc, RequestValidationError)
    message, errors = invalid_request(exc)
    content_type = request.headers.get("content-type", "")
    if any(e.get("loc") == ("body",) for e in errors) and "json" not in content_type:
        message += " (send the body as JSON with `Content-Type: application/json`)"
    return JSONResponse(error_json(message, errors=_jsonable(errors)), status_code=400)


def create_api(rt: Runtime, settings: DaemonSettings) -> FastAPI:
    """The REST control API over `rt` (the Runtime must be entered and its gateway_url set)."""
    api = FastAPI(
        title="envreg daemon",
        version="1",
        description=__doc__,
        openapi_url=None,
        docs_url=None,
        redoc_url=None,
        routes=router.routes,  # as they are: `include_router` defers them in newer FastAPI releases
        exception_handlers={
            EnvregError: envreg_error,
            HTTPException: http_error,
            RequestValidationError: bad_request,
            Exception: internal_error,
        },
    )
    api.state.daemon = Daemon(rt, settings)
    api.state.openapi_document = lambda: document(api, settings)  # `envreg schema openapi-daemon`
    return api


def document(api: FastAPI, settings: DaemonSettings) -> dict[str, Any]:
    """The OpenAPI document, its isolation enums narrowed to the tiers this daemon allows."""
    if api.openapi_schema is None:
        doc = api.openapi()
        for name in ("CreateSandbox", "ForkBody"):
            prop = doc["components"]["schemas"][name]["properties"]["isolation"]
            prop["enum"] = list(settings.tiers)
            prop["default"] = settings.default_tier
        # bad input is a 400 `Error` here, never FastAPI's 422 `HTTPValidationError`
        for operations in doc["paths"].values():
            for operation in operations.values():
                responses = operation.get("responses", {})
                if "HTTPValidationError" in json.dumps(responses.get("422", {})):
                    del responses["422"]
        for name in ("HTTPValidationError", "ValidationError"):
            doc["components"]["schemas"].pop(name, None)
        _add_links(doc)
        api.openapi_schema = doc
    return api.openapi_schema


def info(sb: Sandbox, with_token: bool = True) -> m.SandboxInfo:
    return m.SandboxInfo(
        id=sb.id,
        env=sb.env,
        env_digest=sb.env_digest,
        isolation=sb.isolation,  # type: ignore[arg-type]
        mcp_url=sb.mcp_url,
        token=sb.token if with_token else None,
        expires_at=sb.expires_at,
    )


# routes ---------------------------------------------------------------------------------------------------
@router.get("/openapi.json", include_in_schema=False)
async def openapi(request: Request) -> JSONResponse:
    return JSONResponse(request.app.state.openapi_document())


@router.get("/v1/healthz", response_model=m.Health, responses=COMMON, tags=["daemon"])
async def healthz(d: Ctx) -> m.Health:
    """Liveness, and what this daemon allows."""
    return m.Health(
        runtime=d.rt.id,
        sandboxes=len(d.rt.sandboxes),
        max_sandboxes=d.settings.max_sandboxes,
        tiers=list(d.settings.tiers),  # type: ignore[arg-type]
        gateway_url=d.rt.gateway_url or "",
        fast_path_calls=d.fast_path.calls if d.fast_path is not None else None,
    )


@router.post(
    "/v1/sandboxes",
    status_code=201,
    response_model=m.SandboxInfo,
    responses={**COMMON, **NOT_FOUND, **MISMATCH, **INVALID, **ENGINE},
    tags=["sandboxes"],
)
async def create_sandbox(d: Ctx, body: m.CreateSandbox) -> m.SandboxInfo:
    """Lease a sandbox, optionally starting from a state or a snapshot. Its MCP URL and token are for an agent."""
    isolation = d.isolation(body)
    d.check_tier(isolation, body.env)
    if {"state", "snapshot"} <= body.model_fields_set:
        raise BadRequest("give a state or a snapshot, not both")
    start: dict[str, Any] | Snapshot | None = body.state
    if body.snapshot is not None:
        start = d.rt.snapshots.get(body.snapshot)
    with d.reserve(1):
        sb = await d.rt.sandbox(
            body.env, isolation=isolation, state=start, ttl=d.ttl(body.ttl), augment=body.augment
        )
    return info(sb)


@router.get(
    "/v1/sandboxes",
    response_model=list[m.SandboxInfo],
    responses=COMMON,
    tags=["sandboxes"],
)
async def list_sandboxes(
    d: Ctx,
    tokens: bool = Query(False, description="Include each sandbox's MCP token (omitted by default)."),
) -> list[m.SandboxInfo]:
    """Every sandbox this daemon leases."""
    return [info(sb, tokens) for sb in list(d.rt.sandboxes.values()) if sb.ended is None]


@router.get(
    "/v1/sandboxes/{sandbox_id}",
    response_model=m.SandboxInfo,
    responses={**COMMON, **NOT_FOUND},
    tags=["sandboxes"],
)
async def get_sandbox(
    d: Ctx,
    sandbox_id: str,
    tokens: bool = Query(False, description="Include the sandbox's MCP token (omitted by default)."),
) -> m.SandboxInfo:
    return info(d.sandbox(sandbox_id), tokens)


@router.delete(
    "/v1/sandboxes/{sandbox_id}",
    status_code=204,
    response_class=Response,
    responses={**COMMON, **NOT_FOUND},
    tags=["sandboxes"],
)
async def delete_sandbox(d: Ctx, sandbox_id: str) -> Response:
    """End the sandbox and free its container or instance; its MCP URL answers 404 from now on."""
    await d.sandbox(sandbox_id).close("deleted")
    return Response(status_code=204)


@router.get(
    "/v1/sandboxes/{sandbox_id}/logs",
    response_model=m.LogInfo,
    responses={
        **COMMON,
        **NOT_FOUND,
        409: {**ERR, "description": "The sandbox's tier keeps no log (a local sandbox)."},
        **ENGINE,
    },
    tags=["sandboxes"],
)
async def get_logs(
    d: Ctx,
    sandbox_id: str,
    tail: int = Query(200, ge=1, le=100_000, description="How many of the last lines."),
) -> m.LogInfo:
    """What the sandbox's environment server printed (on the instance tier: its shared container's)."""
    return m.LogInfo(log=await d.rt.logs(d.sandbox(sandbox_id), tail))


@router.get(
    "/v1/sandboxes/{sandbox_id}/state",
    response_model=m.StateInfo,
    responses={**COMMON, **NOT_FOUND, **UPSTREAM},
    tags=["state"],
)
async def get_state(d: Ctx, sandbox_id: str) -> m.StateInfo:
    state = await d.sandbox(sandbox_id).state()
    return m.StateInfo(sha256=sha256_hex(canonical_json(state)), state=state)


@router.put(
    "/v1/sandboxes/{sandbox_id}/state",
    response_model=m.StateInfo,
    responses={**COMMON, **NOT_FOUND, **INVALID, **UPSTREAM},
    tags=["state"],
)
async def put_state(d: Ctx, sandbox_id: str, body: m.StateBody) -> m.StateInfo:
    """Replace the whole state. An invalid state is refused (422) and nothing changes."""
    await d.sandbox(sandbox_id).load_state(body.state)
    return await get_state(d, sandbox_id)


@router.post(
    "/v1/sandboxes/{sandbox_id}/reset",
    response_model=m.StateInfo,
    responses={**COMMON, **NOT_FOUND, **UPSTREAM},
    tags=["state"],
)
async def reset(d: Ctx, sandbox_id: str) -> m.StateInfo:
    """Back to the environment's seed state."""
    await d.sandbox(sandbox_id).reset()
    return await get_state(d, sandbox_id)


@router.post(
    "/v1/sandboxes/{sandbox_id}/snapshot",
    status_code=201,
    response_model=m.SnapshotInfo,
    responses={**COMMON, **NOT_FOUND, **UPSTREAM},
    tags=["snapshots"],
)
async def take_snapshot(d: Ctx, sandbox_id: str) -> m.SnapshotInfo:
    """Store the current state, content-addressed; restore or fork it later."""
    snap = await d.sandbox(sandbox_id).snapshot()
    return m.SnapshotInfo(id=snap.id, sha256=snap.sha256, env=snap.env, env_digest=snap.env_digest)


@router.post(
    "/v1/sandboxes/{sandbox_id}/restore",
    response_model=m.StateInfo,
    responses={**COMMON, **NOT_FOUND, **MISMATCH, **INVALID, **UPSTREAM},
    tags=["snapshots"],
)
async def restore(d: Ctx, sandbox_id: str, body: m.RestoreBody) -> m.StateInfo:
    """Load a snapshot of the same environment (409 for another environment's, state untouched)."""
    sb = d.sandbox(sandbox_id)
    await sb.restore(d.rt.snapshots.get(body.snapshot))
    return await get_state(d, sandbox_id)


@router.post(
    "/v1/sandboxes/{sandbox_id}/renew",
    response_model=m.RenewInfo,
    responses={**COMMON, **NOT_FOUND},
    tags=["sandboxes"],
)
async def renew(d: Ctx, sandbox_id: str, body: m.RenewBody) -> m.RenewInfo:
    """Extend the lease to `ttl` seconds from now."""
    sb = d.sandbox(sandbox_id)
    expires_at = sb.renew(body.ttl)
    return m.RenewInfo(id=sb.id, expires_at=expires_at)


@router.post(
    "/v1/fork",
    status_code=201,
    response_model=list[m.SandboxInfo],
    responses={**COMMON, **NOT_FOUND, **MISMATCH, **INVALID, **ENGINE},
    tags=["snapshots"],
)
async def fork(d: Ctx, body: m.ForkBody) -> list[m.SandboxInfo]:
    """`n` new sandboxes that all start from the snapshot; all or none."""
    snap = d.rt.snapshots.get(body.snapshot)
    isolation = d.isolation(body)
    d.check_tier(isolation, snap.env)
    with d.reserve(body.n):
        created = await d.rt.fork(snap, body.n, isolation=isolation, ttl=d.ttl(body.ttl))  # type: ignore[arg-type]
    return [info(sb) for sb in created]


@router.post(
    "/v1/sandboxes/{sandbox_id}/call",
    response_model=m.CallToolResult,
    response_model_exclude_none=True,
    responses={**COMMON, **NOT_FOUND, **UPSTREAM},
    tags=["tools"],
)
async def call_tool(d: Ctx, sandbox_id: str, body: m.CallBody) -> dict[str, Any]:
    """Call a tool, as an agent would over MCP; the result is an MCP `CallToolResult`."""
    result = await d.sandbox(sandbox_id).call_tool(body.name, body.arguments)
    return result.to_mcp()


@router.get(
    "/v1/sandboxes/{sandbox_id}/augmentation",
    response_model=list[dict[str, Any]],
    responses={**COMMON, **NOT_FOUND, **UPSTREAM},
    tags=["tools"],
)
async def augmentation_labels(d: Ctx, sandbox_id: str) -> list[dict[str, Any]]:
    """What the sandbox's augmentation did to each call (empty without one); the agent never sees it."""
    return await d.sandbox(sandbox_id).augmentation_labels()


@router.get(
    "/v1/sandboxes/{sandbox_id}/tools",
    response_model=list[dict[str, Any]],
    responses={**COMMON, **NOT_FOUND, **UPSTREAM},
    tags=["tools"],
)
async def list_tools(d: Ctx, sandbox_id: str) -> list[dict[str, Any]]:
    """The environment's tools in MCP wire form."""
    return await d.sandbox(sandbox_id).list_tools()


_SANDBOX_OPERATIONS = (
    "get_sandbox",
    "delete_sandbox",
    "get_state",
    "put_state",
    "reset",
    "take_snapshot",
    "renew",
    "call_tool",
    "list_tools",
    "augmentation_labels",
)


def _add_links(doc: dict[str, Any]) -> None:
    """OpenAPI links: a created sandbox's id feeds its routes, a snapshot's id feeds restore and fork."""
    by_id = {
        op["operationId"]: op for ops in doc["paths"].values() for op in ops.values() if "operationId" in op
    }
    sandbox_links = {
        name: {"operationId": name, "parameters": {"sandbox_id": "$response.body#/id"}}
        for name in _SANDBOX_OPERATIONS
    }
    by_id["create_sandbox"]["responses"]["201"]["links"] = sandbox_links
    by_id["take_snapshot"]["responses"]["201"]["links"] = {
        "restore": {
            "operationId": "restore",
            "parameters": {"sandbox_id": "$request.path.sandbox_id"},
            "requestBody": {"snapshot": "$response.body#/id"},
        },
        "fork": {"operationId": "fork", "requestBody": {"snapshot": "$response.body#/id", "n": 1}},
    }


class DaemonApp:
    """One ASGI app: ``/sandboxes/<id>/mcp`` to the gateway, the rest to the control API (bodies capped).

    Both are behind one `AccessGuard` (Host / Origin checks, CORS for the allowed browser origins).
    """

    def __init__(
        self,
        api: FastAPI,
        gateway: Gateway,
        settings: DaemonSettings | None = None,
        console: ASGIApp | None = None,
    ) -> None:
        self.api = api
        self.gateway = gateway
        self.console = console
        settings = settings or DaemonSettings(token="")
        self.max_body = settings.max_body
        self.guarded = AccessGuard(self.route, settings.allowed_hosts, settings.cors_origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.guarded(scope, receive, send)

    async def route(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].startswith(GATEWAY_PREFIX):
            await self.gateway(scope, receive, send)
            return
        if scope["type"] == "http" and scope["method"] in ("POST", "PUT", "PATCH"):
            try:
                body = await read_body(scope, receive, self.max_body)
            except BodyTooLarge:
                await send_json(
                    send, 413, {"error": f"request body over the daemon's {self.max_body} byte limit"}
                )
                return
            if (problem := json_problem(body)) is not None:
                await send_json(send, 400, {"error": f"invalid request: {problem}"})
                return
            receive = replay(body, receive)
        if self.console is not None and scope["type"] == "http" and _is_console(scope["path"]):
            await self.console(scope, receive, send)  # bodies capped as the API's
            return
        await self.api(scope, receive, send)


def _no_constant(name: str) -> None:
    raise _NotJson(f"{name} is not JSON (RFC 8259 has no NaN or Infinity): send a number, or null")


class _NotJson(ValueError):
    pass


def json_problem(body: bytes) -> str | None:
    """Why a JSON body cannot be taken although Python's parser reads it (NaN, Infinity, a lone
    surrogate such as ``\\ud800``), or None (malformed JSON is left to the API, which names it)."""
    if not body.strip():
        return None
    try:
        data = json.loads(body, parse_constant=_no_constant)
    except _NotJson as exc:
        return str(exc)
    except ValueError:
        return None
    try:
        json.dumps(data, ensure_ascii=False).encode()
    except UnicodeEncodeError as exc:
        lone = exc.object[exc.start : exc.end].encode("unicode_escape").decode()
        return f"the body holds a lone surrogate ({lone}): every string must be valid Unicode"
    return None


def _is_console(path: str) -> bool:
    return path == "/ui" or path.startswith("/ui/")


def create_console_app(rt: Runtime, settings: DaemonSettings) -> ASGIApp:
    """The web console over the daemon's runtime: the catalog, its sandboxes, the ``ui_data`` folders."""
    from envreg.config import images_root, manifests_root
    from envreg.console.app import Console, create_console
    from envreg.console.catalog import Catalog
    from envreg.console.data import DataFiles

    console = Console(
        runtime=rt,
        token=settings.token,
        catalog=Catalog(manifests_root(), images_root()),
        data=DataFiles(folders=settings.ui_data),
        tiers=settings.tiers,
        max_sandboxes=settings.max_sandboxes,
        default_ttl=settings.default_ttl,
    )
    return create_console(console)


def create_app(rt: Runtime, settings: DaemonSettings, http: httpx2.AsyncClient) -> DaemonApp:
    """The daemon app over an entered Runtime; `http` is the gateway's upstream client."""
    gateway = Gateway(rt.get, http, ended=rt.ended_reason)
    return DaemonApp(create_api(rt, settings), gateway, settings, create_console_app(rt, settings))
