"""The control plane (trainer only, bearer token): instances, state load / dump / reset, snapshots
kept by hash, manifest, health.

A plain ASGI app with a small route table: it imports nothing beyond the environment server's own
modules, so that a server listens sooner.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError
from starlette.types import ASGIApp, Receive, Scope, Send

from envreg.canonical import sha256_hex
from envreg.host_paths import public_text
from envreg.http.asgi import BodyTooLarge, read_body, send_json
from envreg.http.auth import bearer_matches, bearer_token
from envreg.protocol import DEFAULT_INSTANCE, ENV_RECYCLE, agent_path
from envreg.server.instances import InstanceLimitReached, InstanceStore
from envreg.server.snapshots import SHA256, SnapshotRefused


@dataclass
class Request:
    method: str
    params: dict[str, str]
    headers: dict[bytes, bytes]
    body: bytes = b""


@dataclass
class Response:
    status: int
    body: bytes
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    replaced: Any = None
    """A state this request replaced, freed only once the answer is sent: freeing a big state that
    shares nothing with the new one takes milliseconds (~6 ms for 1 MB), none of them the caller's."""

    @classmethod
    def json(cls, data: Any, status: int = 200, replaced: Any = None) -> Response:
        return cls(status, json.dumps(data, separators=(",", ":")).encode(), replaced=replaced)


Handler = Callable[[Request], Awaitable[Response]]


def error(status: int, message: str, **extra: Any) -> Response:
    """Every error answer of a route: ``{"error": message, ...}``, no host path in it (`public_text`)."""
    return Response.json({"error": public_text(message), **extra}, status)


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


def json_body(request: Request) -> tuple[Any, Response | None]:
    if not request.body:
        return None, None
    try:
        return json.loads(request.body), None
    except ValueError as exc:
        return None, error(400, f"request body is not valid JSON: {exc}")


class Router:
    """Routes by method and path pattern (``{name}`` matches one path segment)."""

    def __init__(self) -> None:
        self.routes: list[tuple[re.Pattern[str], dict[str, Handler]]] = []

    def add(self, path: str, method: str, handler: Handler) -> None:
        pattern = re.compile("^" + re.sub(r"\{(\w+)\}", r"(?P<\1>[^/]+)", path) + "$")
        for known, methods in self.routes:
            if known.pattern == pattern.pattern:
                methods[method] = handler
                return
        self.routes.append((pattern, {method: handler}))

    def find(self, method: str, path: str) -> tuple[Handler | None, dict[str, str], list[str]]:
        for pattern, methods in self.routes:
            match = pattern.match(path)
            if match:
                return methods.get(method), match.groupdict(), sorted(methods)
        return None, {}, []


class ControlPlane:
    """Every route needs ``Authorization: Bearer <token>``; request bodies are capped at `max_body`."""

    def __init__(self, router: Router, token: str, max_body: int) -> None:
        self.router = router
        self.token = token
        self.max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        if not bearer_matches(scope, self.token):
            message = "missing or wrong bearer token" if bearer_token(scope) else "missing bearer token"
            await send(
                {
                    "type": "http.response.start",
                    "status": 401,
                    "headers": [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")],
                }
            )
            await send({"type": "http.response.body", "body": json.dumps({"error": message}).encode()})
            return
        handler, params, allowed = self.router.find(scope["method"], scope["path"])
        if handler is None:
            if allowed:
                await send_json(
                    send, 405, {"error": f"{scope['method']} is not allowed here: {', '.join(allowed)}"}
                )
            else:
                await send_json(send, 404, {"error": f"no control route {scope['path'][:80]!r}"})
            return
        request = Request(scope["method"], params, dict(scope["headers"]))
        if scope["method"] in ("POST", "PUT", "PATCH"):
            try:
                request.body = await read_body(scope, receive, self.max_body)
            except BodyTooLarge:
                await send_json(
                    send,
                    413,
                    {
                        "error": f"request body over this server's limit of {self.max_body:,} bytes; nothing was changed"
                    },
                )
                return
        response = await handler(request)
        await send(
            {
                "type": "http.response.start",
                "status": response.status,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(response.body)).encode()),
                    *response.headers,
                ],
            }
        )
        await send({"type": "http.response.body", "body": response.body})
        response.replaced = None  # sent: now the replaced state may go


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
    env = store.env
    router = Router()

    def route(path: str, method: str) -> Callable[[Handler], Handler]:
        def register(handler: Handler) -> Handler:
            router.add(path, method, handler)
            return handler

        return register

    def instance_of(request: Request) -> Any:
        return store.get(request.params["instance_id"])

    def missing(request: Request) -> Response:
        return error(404, f"no instance {request.params['instance_id']!r} on this server")

    def missing_snapshot(sha: str) -> Response:
        return error(
            404,
            f"no snapshot {sha[:12]}... on this server: upload it first (PUT /snapshots/{{sha256}})",
            missing_snapshot=sha,
        )

    @route("/healthz", "GET")
    async def healthz(request: Request) -> Response:
        return Response.json(
            {
                "status": "ok",
                "env": env.name,
                "version": env.version,
                "instances": len(store),
                "generation": generation,
                "states": {"bytes": store.state_bytes, "budget": store.state_budget},
                **({"sessions": sessions()} if sessions is not None else {}),
            }
        )

    @route("/recycle", "POST")
    async def recycle_server(request: Request) -> Response:
        if recycle is None:
            return error(409, f"this server cannot be recycled: start it with {ENV_RECYCLE}=1")
        recycle()
        return Response(202, json.dumps({"generation": generation}).encode(), [(b"connection", b"close")])

    @route("/manifest", "GET")
    async def get_manifest(request: Request) -> Response:
        return Response.json(manifest)

    @route("/instances", "GET")
    async def list_instances(request: Request) -> Response:
        return Response.json({"instances": [{"id": i, "mcp_path": agent_path(i)} for i in store.ids()]})

    @route("/instances", "POST")
    async def create_instance(request: Request) -> Response:
        data, bad = json_body(request)
        if bad:
            return bad
        data = data or {}
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

    @route("/instances/{instance_id}", "DELETE")
    async def delete_instance(request: Request) -> Response:
        instance_id = request.params["instance_id"]
        if instance_id == DEFAULT_INSTANCE:
            return error(409, "the default instance cannot be deleted; reset it instead")
        if not store.delete(instance_id):
            return missing(request)
        return Response(204, b"")

    @route("/instances/{instance_id}/state", "GET")
    async def get_state(request: Request) -> Response:
        instance = instance_of(request)
        return state_response(instance) if instance else missing(request)

    @route("/instances/{instance_id}/state", "PUT")
    async def put_state(request: Request) -> Response:
        instance = instance_of(request)
        if instance is None:
            return missing(request)
        data, bad = json_body(request)
        if bad:
            return bad
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

    @route("/instances/{instance_id}/reset", "POST")
    async def reset(request: Request) -> Response:
        instance = instance_of(request)
        if instance is None:
            return missing(request)
        replaced = instance.state
        return state_response(store.reset(request.params["instance_id"]), replaced=replaced)

    @route("/instances/{instance_id}/augmentation", "PUT")
    async def put_augmentation(request: Request) -> Response:
        if instance_of(request) is None:
            return missing(request)
        data, bad = json_body(request)
        if bad:
            return bad
        try:
            from envreg.env.augment import Augmentation  # most servers are never augmented

            config = Augmentation.model_validate(data)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(map(str, e['loc'])) or 'body'}: {e['msg']}" for e in exc.errors()
            )
            return error(422, f"invalid augmentation, nothing was changed: {problems}")
        return Response.json(store.augment(request.params["instance_id"], config).describe())

    @route("/instances/{instance_id}/augmentation", "GET")
    async def get_augmentation(request: Request) -> Response:
        if instance_of(request) is None:
            return missing(request)
        augmenter = store.augmenter(request.params["instance_id"])
        return Response.json(augmenter.describe() if augmenter else {"config": None, "labels": []})

    @route("/instances/{instance_id}/augmentation", "DELETE")
    async def delete_augmentation(request: Request) -> Response:
        if instance_of(request) is None:
            return missing(request)
        store.augment(request.params["instance_id"], None)
        return Response(204, b"")

    @route("/instances/{instance_id}/snapshot", "POST")
    async def take_snapshot(request: Request) -> Response:
        instance = instance_of(request)
        if instance is None:
            return missing(request)
        return Response.json({"sha256": store.snapshots.keep(instance.state, env.committed)})

    @route("/instances/{instance_id}/restore", "POST")
    async def restore(request: Request) -> Response:
        instance = instance_of(request)
        if instance is None:
            return missing(request)
        data, bad = json_body(request)
        if bad:
            return bad
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

    @route("/snapshots/{sha}", "GET")
    async def get_snapshot(request: Request) -> Response:
        sha = request.params["sha"]
        payload = store.snapshots.payload(sha) if SHA256.match(sha) else None
        if payload is None:
            return missing_snapshot(sha)
        return Response(200, payload, [(b"content-encoding", b"gzip")])

    @route("/snapshots/{sha}", "PUT")
    async def put_snapshot(request: Request) -> Response:
        sha = request.params["sha"]
        if not SHA256.match(sha):
            return error(
                400, "a snapshot's address is the sha256 of its canonical JSON: 64 lowercase hex digits"
            )
        encoding = request.headers.get(b"content-encoding", b"").decode("latin-1").strip().lower() or None
        try:
            store.snapshots.receive(sha, request.body, encoding, env.committed, max_body)
        except ValidationError as exc:
            return validation_error(exc)
        except SnapshotRefused as exc:
            return error(422, f"{exc}; nothing was changed")
        return Response.json({"sha256": sha}, 201)

    return ControlPlane(router, token, max_body)


__all__ = ["ControlPlane", "control_app"]
