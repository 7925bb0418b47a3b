"""The control plane (trainer only, bearer token): instances, state load / dump / reset, manifest, health."""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from envreg.canonical import sha256_hex
from envreg.env.augment import Augmentation
from envreg.protocol import DEFAULT_INSTANCE, agent_path
from envreg.server.http import BodyTooLarge, bearer_matches, bearer_token, read_body, replay, send_json
from envreg.server.instances import InstanceLimitReached, InstanceStore


class BearerAuth:
    """Every control route needs ``Authorization: Bearer <token>``; bodies are capped too."""

    def __init__(self, app: ASGIApp, token: str, max_body: int) -> None:
        self.app = app
        self.token = token
        self.max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if not bearer_matches(scope, self.token):
            await send(
                {
                    "type": "http.response.start",
                    "status": 401,
                    "headers": [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")],
                }
            )
            given = bearer_token(scope)
            message = "missing or wrong bearer token" if given else "missing bearer token"
            await send({"type": "http.response.body", "body": json.dumps({"error": message}).encode()})
            return
        if scope["method"] in ("POST", "PUT", "PATCH"):
            try:
                body = await read_body(scope, receive, self.max_body)
            except BodyTooLarge:
                await send_json(send, 413, {"error": f"request body over the {self.max_body} byte limit"})
                return
            receive = replay(body, receive)
        await self.app(scope, receive, send)


def error(status: int, message: str, **extra: Any) -> JSONResponse:
    return JSONResponse({"error": message, **extra}, status_code=status)


def state_response(instance: Any, status: int = 200) -> Response:
    canonical = instance.state.canonical()
    body = '{"sha256":"' + sha256_hex(canonical) + '","state":' + canonical + "}"
    return Response(body, status_code=status, media_type="application/json")


def validation_error(exc: ValidationError) -> JSONResponse:
    problems = [
        {"loc": ".".join(str(p) for p in e["loc"]), "msg": e["msg"], "type": e["type"]}
        for e in exc.errors(include_url=False)
    ]
    summary = "; ".join(f"{p['loc'] or 'state'}: {p['msg']}" for p in problems[:5])
    return error(422, f"invalid state, nothing was changed: {summary}", errors=problems)


async def json_body(request: Request) -> tuple[Any, JSONResponse | None]:
    raw = await request.body()
    if not raw:
        return None, None
    try:
        return json.loads(raw), None
    except ValueError as exc:
        return None, error(400, f"request body is not valid JSON: {exc}")


def control_app(store: InstanceStore, token: str, max_body: int, manifest: dict[str, Any]) -> ASGIApp:
    env = store.env

    def lookup(request: Request) -> Any:
        return store.get(request.path_params["instance_id"])

    def missing(request: Request) -> JSONResponse:
        return error(404, f"no instance {request.path_params['instance_id']!r} on this server")

    async def healthz(request: Request) -> JSONResponse:
        return JSONResponse(
            {"status": "ok", "env": env.name, "version": env.version, "instances": len(store)}
        )

    async def get_manifest(request: Request) -> JSONResponse:
        return JSONResponse(manifest)

    async def list_instances(request: Request) -> JSONResponse:
        return JSONResponse({"instances": [{"id": i, "mcp_path": agent_path(i)} for i in store.ids()]})

    async def create_instance(request: Request) -> Response:
        data, bad = await json_body(request)
        if bad:
            return bad
        data = data or {}
        if not isinstance(data, dict) or not set(data) <= {"state", "id"}:
            return error(400, 'body must be an object with optional "state" and "id"')
        try:
            instance_id, instance = store.create(data.get("state"), data.get("id"))
        except ValidationError as exc:
            return validation_error(exc)
        except InstanceLimitReached as exc:
            return error(429, f"{exc}; delete instances first")
        except KeyError as exc:
            return error(409, str(exc.args[0]))
        except ValueError as exc:
            return error(400, str(exc))
        return JSONResponse(
            {"id": instance_id, "mcp_path": agent_path(instance_id), "sha256": instance.state.sha256()}, 201
        )

    async def delete_instance(request: Request) -> Response:
        instance_id = request.path_params["instance_id"]
        if instance_id == DEFAULT_INSTANCE:
            return error(409, "the default instance cannot be deleted; reset it instead")
        if not store.delete(instance_id):
            return missing(request)
        return Response(status_code=204)

    async def get_state(request: Request) -> Response:
        instance = lookup(request)
        return state_response(instance) if instance else missing(request)

    async def put_state(request: Request) -> Response:
        instance = lookup(request)
        if instance is None:
            return missing(request)
        data, bad = await json_body(request)
        if bad:
            return bad
        if not isinstance(data, dict):
            return error(400, "body must be the state as a JSON object")
        try:
            instance.load_state(data)
        except ValidationError as exc:
            return validation_error(exc)
        return state_response(instance)

    async def reset(request: Request) -> Response:
        instance = lookup(request)
        if instance is None:
            return missing(request)
        return state_response(store.reset(request.path_params["instance_id"]))

    async def put_augmentation(request: Request) -> Response:
        instance_id = request.path_params["instance_id"]
        if lookup(request) is None:
            return missing(request)
        data, bad = await json_body(request)
        if bad:
            return bad
        try:
            config = Augmentation.model_validate(data)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(map(str, e['loc'])) or 'body'}: {e['msg']}" for e in exc.errors()
            )
            return error(422, f"invalid augmentation, nothing was changed: {problems}")
        return JSONResponse(store.augment(instance_id, config).describe())

    async def get_augmentation(request: Request) -> Response:
        if lookup(request) is None:
            return missing(request)
        augmenter = store.augmenter(request.path_params["instance_id"])
        return JSONResponse(augmenter.describe() if augmenter else {"config": None, "labels": []})

    async def delete_augmentation(request: Request) -> Response:
        if lookup(request) is None:
            return missing(request)
        store.augment(request.path_params["instance_id"], None)
        return Response(status_code=204)

    routes = [
        Route("/healthz", healthz),
        Route("/manifest", get_manifest),
        Route("/instances", list_instances, methods=["GET"]),
        Route("/instances", create_instance, methods=["POST"]),
        Route("/instances/{instance_id}", delete_instance, methods=["DELETE"]),
        Route("/instances/{instance_id}/state", get_state, methods=["GET"]),
        Route("/instances/{instance_id}/state", put_state, methods=["PUT"]),
        Route("/instances/{instance_id}/reset", reset, methods=["POST"]),
        Route("/instances/{instance_id}/augmentation", get_augmentation, methods=["GET"]),
        Route("/instances/{instance_id}/augmentation", put_augmentation, methods=["PUT"]),
        Route("/instances/{instance_id}/augmentation", delete_augmentation, methods=["DELETE"]),
    ]
    return BearerAuth(Starlette(routes=routes), token, max_body)
