"""A small router for raw-ASGI fronts: routes by method and path, handlers as plain module-level functions.

    router = Router()

    @router.route("/items/{item_id}", "GET")
    async def get_item(request: Request) -> Response:
        return Response.json(request.context.items[request.params["item_id"]])

    app = RoutedApp(router, context=..., token="...", max_body=1 << 20)

Every route needs ``Authorization: Bearer <token>``; request bodies (POST / PUT / PATCH) are read whole,
capped at `max_body`; a path no route has is a 404, a method the path does not take a 405; a handler that
raises `Refused` answers with its response. What a front's
handlers share (its store, its settings) is the app's `context`, given to each handler on its `Request`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.types import Receive, Scope, Send

from envreg.http.asgi import BodyTooLarge, read_body, send_bytes, send_error
from envreg.http.auth import bearer_matches, bearer_token
from envreg.http.errors import error_json, too_large


@dataclass
class Request:
    method: str
    params: dict[str, str]
    headers: dict[bytes, bytes]
    body: bytes = b""
    context: Any = None
    """The app's `RoutedApp.context`: what its handlers share."""


@dataclass
class Response:
    status: int
    body: bytes
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    replaced: Any = None
    """A value this request replaced, freed only once the answer is sent: freeing a big state that
    shares nothing with the new one takes milliseconds (~6 ms for 1 MB), none of them the caller's."""

    @classmethod
    def json(cls, data: Any, status: int = 200, replaced: Any = None) -> Response:
        return cls(status, json.dumps(data, separators=(",", ":")).encode(), replaced=replaced)

    @classmethod
    def error(cls, status: int, message: str, **fields: Any) -> Response:
        """``{"error": message, **fields}`` (`envreg.http.errors.error_json`: no host path in it)."""
        return cls.json(error_json(message, **fields), status)


class Refused(Exception):
    """Raised by a handler, or by what it calls, to answer with `response` at once (starlette's
    `HTTPException`, for raw-ASGI fronts): a lookup that fails says so in one place."""

    def __init__(self, response: Response) -> None:
        super().__init__(response.status)
        self.response = response


Handler = Callable[[Request], Awaitable[Response]]


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

    def route(self, path: str, method: str) -> Callable[[Handler], Handler]:
        """A decorator: `add` the handler, and return it unchanged."""

        def register(handler: Handler) -> Handler:
            self.add(path, method, handler)
            return handler

        return register

    def find(self, method: str, path: str) -> tuple[Handler | None, dict[str, str], list[str]]:
        """The handler (None when there is none), the path's parameters, the methods the path takes."""
        for pattern, methods in self.routes:
            match = pattern.match(path)
            if match:
                return methods.get(method), match.groupdict(), sorted(methods)
        return None, {}, []


class RoutedApp:
    """An ASGI app over a `Router`: bearer token first, then the route, the body, the handler."""

    def __init__(
        self, router: Router, *, context: Any, token: str, max_body: int, noun: str = "route"
    ) -> None:
        self.router = router
        self.context = context
        self.token = token
        self.max_body = max_body
        self.noun = noun

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        if not bearer_matches(scope, self.token):
            message = "missing or wrong bearer token" if bearer_token(scope) else "missing bearer token"
            await send_error(send, 401, message, [(b"www-authenticate", b"Bearer")])
            return
        handler, params, allowed = self.router.find(scope["method"], scope["path"])
        if handler is None:
            if allowed:
                await send_error(send, 405, f"{scope['method']} is not allowed here: {', '.join(allowed)}")
            else:
                await send_error(send, 404, f"no {self.noun} {scope['path'][:80]!r}")
            return
        request = Request(scope["method"], params, dict(scope["headers"]), context=self.context)
        if scope["method"] in ("POST", "PUT", "PATCH"):
            try:
                request.body = await read_body(scope, receive, self.max_body)
            except BodyTooLarge:
                await send_error(send, 413, too_large(self.max_body, "nothing was changed"))
                return
        try:
            response = await handler(request)
        except Refused as refused:
            response = refused.response
        await send_bytes(send, response.status, response.body, headers=response.headers)
        response.replaced = None  # sent: now the replaced value may go
