"""`envreg.http.routing` and the environment server's control plane built on it, in process (no sockets)."""

from __future__ import annotations

import gc
import weakref

import httpx2
import pytest
from conftest import COUNTER

from envreg.http.routing import Refused, Request, Response, RoutedApp, Router
from envreg.server.app import EnvServer, ServerConfig
from envreg.server.control import router as control_router

pytestmark = pytest.mark.anyio
TOKEN = "t0ken"
AUTH = {"authorization": f"Bearer {TOKEN}"}

router = Router()


LIVE: weakref.WeakSet = weakref.WeakSet()


class Held:
    """A value a request replaces; the test watches when it is freed."""

    def __init__(self) -> None:
        LIVE.add(self)


@router.route("/notes/{name}", "GET")
async def get_note(request: Request) -> Response:
    notes = request.context
    if request.params["name"] not in notes:
        return Response.error(404, f"no note {request.params['name']!r}", known=sorted(notes))
    return Response.json({"text": notes[request.params["name"]]})


@router.route("/notes/{name}", "PUT")
async def put_note(request: Request) -> Response:
    request.context[request.params["name"]] = request.body.decode()
    return Response(204, b"", replaced=Held())


def note_of(request: Request) -> str:
    """A lookup that refuses for its handlers: a 404 naming the note."""
    name = request.params["name"]
    if name not in request.context:
        raise Refused(Response.error(404, f"no note {name!r}"))
    return request.context[name]


@router.route("/notes/{name}/length", "GET")
async def note_length(request: Request) -> Response:
    return Response.json(len(note_of(request)))


def client(app) -> httpx2.AsyncClient:
    return httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url="http://127.0.0.1:9000")


async def test_routes_reach_their_handler_with_the_apps_context() -> None:
    notes: dict[str, str] = {"a": "first"}
    async with client(RoutedApp(router, context=notes, token=TOKEN, max_body=64)) as http:
        assert (await http.get("/notes/a", headers=AUTH)).json() == {"text": "first"}
        assert (await http.put("/notes/b", content=b"second", headers=AUTH)).status_code == 204
        assert notes == {"a": "first", "b": "second"}
        missing = await http.get("/notes/c", headers=AUTH)
        assert missing.status_code == 404 and missing.json() == {"error": "no note 'c'", "known": ["a", "b"]}


async def test_a_refusal_raised_below_a_handler_is_its_answer() -> None:
    async with client(RoutedApp(router, context={"a": "first"}, token=TOKEN, max_body=64)) as http:
        assert (await http.get("/notes/a/length", headers=AUTH)).json() == 5
        refused = await http.get("/notes/z/length", headers=AUTH)
        assert refused.status_code == 404 and refused.json() == {"error": "no note 'z'"}


async def test_two_apps_on_one_router_keep_their_own_context_and_token() -> None:
    first = RoutedApp(router, context={"x": "one"}, token="first", max_body=64)
    second = RoutedApp(router, context={"x": "two"}, token="second", max_body=64)
    async with client(first) as one, client(second) as two:
        assert (await one.get("/notes/x", headers={"authorization": "Bearer first"})).json()["text"] == "one"
        assert (await two.get("/notes/x", headers={"authorization": "Bearer second"})).json()["text"] == "two"
        assert (await two.get("/notes/x", headers={"authorization": "Bearer first"})).status_code == 401


@pytest.mark.parametrize(
    ("headers", "message"),
    [({}, "missing bearer token"), ({"authorization": "Bearer nope"}, "missing or wrong bearer token")],
)
async def test_no_route_answers_without_the_token(headers, message) -> None:
    notes = {"a": "secret"}
    async with client(RoutedApp(router, context=notes, token=TOKEN, max_body=64)) as http:
        for request in (http.get("/notes/a", headers=headers), http.get("/nowhere", headers=headers)):
            r = await request
            assert r.status_code == 401 and r.json() == {"error": message}
            assert r.headers["www-authenticate"] == "Bearer"


async def test_unknown_paths_methods_and_large_bodies_are_refused_saying_why() -> None:
    notes: dict[str, str] = {}
    async with client(RoutedApp(router, context=notes, token=TOKEN, max_body=64, noun="note route")) as http:
        nowhere = await http.get("/elsewhere", headers=AUTH)
        assert nowhere.status_code == 404 and nowhere.json()["error"] == "no note route '/elsewhere'"
        wrong = await http.delete("/notes/a", headers=AUTH)
        assert wrong.status_code == 405 and wrong.json()["error"] == "DELETE is not allowed here: GET, PUT"
        big = await http.put("/notes/a", content=b"x" * 65, headers=AUTH)
        assert big.status_code == 413
        assert big.json()["error"] == "request body over this server's limit of 64 bytes: nothing was changed"
        assert notes == {}, "a refused body changes nothing"


async def test_a_replaced_value_is_freed_once_the_answer_is_sent() -> None:
    app = RoutedApp(router, context={}, token=TOKEN, max_body=64)
    alive_while_sending: list[int] = []

    async def send(message) -> None:
        if message["type"] == "http.response.body":
            gc.collect()
            alive_while_sending.append(len(LIVE))

    async def receive():
        return {"type": "http.request", "body": b"v", "more_body": False}

    scope = {
        "type": "http",
        "method": "PUT",
        "path": "/notes/k",
        "headers": [(b"authorization", b"Bearer t0ken")],
    }
    await app(scope, receive, send)
    gc.collect()
    assert alive_while_sending == [1] and len(LIVE) == 0


# the control plane, in process ---------------------------------------------------------------------
@pytest.fixture
def control() -> httpx2.AsyncClient:
    server = EnvServer.build(ServerConfig(env=COUNTER, token=TOKEN))
    return client(server.control)


async def test_the_control_plane_serves_its_routes_in_process(control) -> None:
    async with control as http:
        health = (await http.get("/healthz", headers=AUTH)).json()
        assert health["status"] == "ok" and health["instances"] == 1
        created = await http.post("/instances", json={"id": "i1"}, headers=AUTH)
        assert created.status_code == 201 and created.json()["mcp_path"] == "/i/i1/mcp"
        state = (await http.get("/instances/i1/state", headers=AUTH)).json()
        snap = (await http.post("/instances/i1/snapshot", headers=AUTH)).json()["sha256"]
        assert snap == state["sha256"]
        assert (await http.delete("/instances/default", headers=AUTH)).status_code == 409
        assert (await http.delete("/instances/i1", headers=AUTH)).status_code == 204
        gone = await http.get("/instances/i1/state", headers=AUTH)
        assert gone.status_code == 404 and gone.json() == {"error": "no instance 'i1' on this server"}


async def test_the_control_planes_handlers_are_module_level() -> None:
    import envreg.server.control as control

    handlers = {h for _, methods in control_router.routes for h in methods.values()}
    assert handlers and all(getattr(control, h.__name__) is h for h in handlers)
