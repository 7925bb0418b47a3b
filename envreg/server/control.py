"""The control plane (trainer only, bearer token): instances, state load / dump / reset, snapshots
kept by hash, manifest, health.

A raw-ASGI app over `envreg.http.routing` (module-level handlers, the server's `Control` as their
context): it imports nothing beyond the environment server's own modules, so that a server listens sooner.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError
from starlette.types import ASGIApp

from envreg.canonical import sha256_hex
from envreg.http.routing import Refused, Request, Response, RoutedApp, Router
from envreg.protocol import DEFAULT_INSTANCE, ENV_RECYCLE, agent_path
from envreg.server.instances import InstanceLimitReached, InstanceStore
from envreg.server.snapshots import SHA256, SnapshotRefused

router = Router()
error = Response.error


@dataclass
class Control:
    """What the control plane's handlers share: the server's instances, its manifest, how it recycles."""

    store: InstanceStore
    manifest: dict[str, Any]
    max_body: int
    recycle: Callable[[], None] | None = None
    generation: int = 0
    sessions: Callable[[], dict[str, Any]] | None = None


def state_response(instance: Any, status: int = 200, replaced: Any = None) -> Response:
    canonical = instance.state.canonical(cached=False)  # O(state), as sending it is
    body = '{"sha256":"' + sha256_hex(canonical) + '","state":' + canonical + "}"
    return Response(status, body.encode(), replaced=replaced)


def validation_error(exc: ValidationError) -> Response:
    problems = [
        {"loc": ".".join(str(p) for p in e["loc"]), "msg": e["msg"], "type": e["type"]}
        for e in exc.errors(include_url=False)
    ]
    summary = "; ".join(f"{p['loc'] or 'state'}: {p['msg']}" for p in problems[:5])
    return error(422, f"invalid state, nothing was changed: {summary}", errors=problems)


def json_body(request: Request) -> Any:
    """The request's JSON body (None when empty); a 400 when it is not JSON."""
    if not request.body:
        return None
    try:
        return json.loads(request.body)
    except ValueError as exc:
        raise Refused(error(400, f"request body is not valid JSON: {exc}")) from None


def instance_of(request: Request) -> Any:
    """The instance the path names; a 404 when this server has none of that id."""
    instance = request.context.store.get(request.params["instance_id"])
    if instance is None:
        raise Refused(missing(request))
    return instance


def missing(request: Request) -> Response:
    return error(404, f"no instance {request.params['instance_id']!r} on this server")


def missing_snapshot(sha: str) -> Response:
    return error(
        404,
        f"no snapshot {sha[:12]}... on this server: upload it first (PUT /snapshots/{{sha256}})",
        missing_snapshot=sha,
    )


@router.route("/healthz", "GET")
async def healthz(request: Request) -> Response:
    ctx: Control = request.context
    return Response.json(
        {
            "status": "ok",
            "env": ctx.store.env.name,
            "version": ctx.store.env.version,
            "instances": len(ctx.store),
            "generation": ctx.generation,
            "states": {"bytes": ctx.store.state_bytes, "budget": ctx.store.state_budget},
            **({"sessions": ctx.sessions()} if ctx.sessions is not None else {}),
        }
    )


@router.route("/recycle", "POST")
async def recycle_server(request: Request) -> Response:
    ctx: Control = request.context
    if ctx.recycle is None:
        return error(409, f"this server cannot be recycled: start it with {ENV_RECYCLE}=1")
    ctx.recycle()
    return Response(202, json.dumps({"generation": ctx.generation}).encode(), [(b"connection", b"close")])


@router.route("/manifest", "GET")
async def get_manifest(request: Request) -> Response:
    ctx: Control = request.context
    return Response.json(ctx.manifest)


@router.route("/instances", "GET")
async def list_instances(request: Request) -> Response:
    store: InstanceStore = request.context.store
    return Response.json({"instances": [{"id": i, "mcp_path": agent_path(i)} for i in store.ids()]})


@router.route("/instances", "POST")
async def create_instance(request: Request) -> Response:
    store: InstanceStore = request.context.store
    data = json_body(request) or {}
    if (
        not isinstance(data, dict)
        or not set(data) <= {"state", "id", "snapshot"}
        or ("state" in data and "snapshot" in data)
    ):
        return error(400, 'body must be an object with optional "id" and "state" or "snapshot"')
    state = data.get("state")
    if "snapshot" in data:
        state = store.snapshots.get(str(data["snapshot"]))
        if state is None:
            return missing_snapshot(str(data["snapshot"]))
    try:
        instance_id, instance = store.create(state, data.get("id"))
    except ValidationError as exc:
        return validation_error(exc)
    except InstanceLimitReached as exc:
        return error(429, f"{exc}; delete instances first")
    except KeyError as exc:
        return error(409, str(exc.args[0]))
    except ValueError as exc:
        return error(400, str(exc))
    return Response.json(
        {"id": instance_id, "mcp_path": agent_path(instance_id), "sha256": instance.state.sha256()}, 201
    )


@router.route("/instances/{instance_id}", "DELETE")
async def delete_instance(request: Request) -> Response:
    store: InstanceStore = request.context.store
    instance_id = request.params["instance_id"]
    if instance_id == DEFAULT_INSTANCE:
        return error(409, "the default instance cannot be deleted; reset it instead")
    if not store.delete(instance_id):
        return missing(request)
    return Response(204, b"")


@router.route("/instances/{instance_id}/state", "GET")
async def get_state(request: Request) -> Response:
    return state_response(instance_of(request))


@router.route("/instances/{instance_id}/state", "PUT")
async def put_state(request: Request) -> Response:
    store: InstanceStore = request.context.store
    instance = instance_of(request)
    data = json_body(request)
    if not isinstance(data, dict):
        return error(400, "body must be the state as a JSON object")
    replaced = instance.state
    try:
        store.load_state(request.params["instance_id"], data)
    except ValidationError as exc:
        return validation_error(exc)
    except InstanceLimitReached as exc:
        return error(429, str(exc))
    return state_response(instance, replaced=replaced)


@router.route("/instances/{instance_id}/reset", "POST")
async def reset(request: Request) -> Response:
    store: InstanceStore = request.context.store
    instance = instance_of(request)
    replaced = instance.state
    return state_response(store.reset(request.params["instance_id"]), replaced=replaced)


@router.route("/instances/{instance_id}/augmentation", "PUT")
async def put_augmentation(request: Request) -> Response:
    store: InstanceStore = request.context.store
    instance_of(request)  # a 404 unless the instance exists
    data = json_body(request)
    try:
        from envreg.env.augment import Augmentation  # most servers are never augmented

        config = Augmentation.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'body'}: {e['msg']}" for e in exc.errors())
        return error(422, f"invalid augmentation, nothing was changed: {problems}")
    return Response.json(store.augment(request.params["instance_id"], config).describe())


@router.route("/instances/{instance_id}/augmentation", "GET")
async def get_augmentation(request: Request) -> Response:
    store: InstanceStore = request.context.store
    instance_of(request)  # a 404 unless the instance exists
    augmenter = store.augmenter(request.params["instance_id"])
    return Response.json(augmenter.describe() if augmenter else {"config": None, "labels": []})


@router.route("/instances/{instance_id}/augmentation", "DELETE")
async def delete_augmentation(request: Request) -> Response:
    store: InstanceStore = request.context.store
    instance_of(request)  # a 404 unless the instance exists
    store.augment(request.params["instance_id"], None)
    return Response(204, b"")


@router.route("/instances/{instance_id}/snapshot", "POST")
async def take_snapshot(request: Request) -> Response:
    store: InstanceStore = request.context.store
    instance = instance_of(request)
    return Response.json({"sha256": store.snapshots.keep(instance.state, store.env.committed)})


@router.route("/instances/{instance_id}/restore", "POST")
async def restore(request: Request) -> Response:
    store: InstanceStore = request.context.store
    instance = instance_of(request)
    data = json_body(request)
    if not isinstance(data, dict) or set(data) != {"snapshot"} or not isinstance(data["snapshot"], str):
        return error(400, 'body must be {"snapshot": "<sha256 of the canonical state>"}')
    state = store.snapshots.get(data["snapshot"])
    if state is None:
        return missing_snapshot(data["snapshot"])
    replaced = instance.state
    try:
        store.load_state(request.params["instance_id"], state)
    except InstanceLimitReached as exc:
        return error(429, str(exc))
    return Response.json({"sha256": data["snapshot"]}, replaced=replaced)


@router.route("/snapshots/{sha}", "GET")
async def get_snapshot(request: Request) -> Response:
    store: InstanceStore = request.context.store
    sha = request.params["sha"]
    payload = store.snapshots.payload(sha) if SHA256.match(sha) else None
    if payload is None:
        return missing_snapshot(sha)
    return Response(200, payload, [(b"content-encoding", b"gzip")])


@router.route("/snapshots/{sha}", "PUT")
async def put_snapshot(request: Request) -> Response:
    ctx: Control = request.context
    sha = request.params["sha"]
    if not SHA256.match(sha):
        return error(400, "a snapshot's address is the sha256 of its canonical JSON: 64 lowercase hex digits")
    encoding = request.headers.get(b"content-encoding", b"").decode("latin-1").strip().lower() or None
    try:
        ctx.store.snapshots.receive(sha, request.body, encoding, ctx.store.env.committed, ctx.max_body)
    except ValidationError as exc:
        return validation_error(exc)
    except SnapshotRefused as exc:
        return error(422, f"{exc}; nothing was changed")
    return Response.json({"sha256": sha}, 201)


def control_app(
    store: InstanceStore,
    token: str,
    max_body: int,
    manifest: dict[str, Any],
    recycle: Callable[[], None] | None = None,
    generation: int = 0,
    sessions: Callable[[], dict[str, Any]] | None = None,
) -> ASGIApp:
    """The control plane; `recycle`, when given, ends the process for a fresh one (`POST /recycle`),
    whose `generation` is one more: a caller waits for `/healthz` to report it. `sessions` says what
    `/healthz` reports of the agent plane's MCP sessions."""
    context = Control(store, manifest, max_body, recycle, generation, sessions)
    return RoutedApp(router, context=context, token=token, max_body=max_body, noun="control route")


__all__ = ["Control", "control_app", "router"]
