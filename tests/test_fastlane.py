"""The gateway's fast lane: plain tool calls relayed in protocol callbacks, everything else through ASGI.

A real environment server (`envreg serve-env`, agent-plane token on, as in a sandbox container), the
gateway served by uvicorn in the test's loop, and real clients (the `mcp` SDK in both eras, raw sockets).
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import anyio
import httptools
import httpx2
import pytest
from conftest import COUNTER
from mcp_helpers import ERAS, caller, mcp_client
from servers import EnvServerProcess, modern_request, stop_all

from envreg.env import load_scenarios
from envreg.env.loader import load_environment
from envreg.env.scenario import run_steps
from envreg.http.client import request as http_request
from envreg.http.fastpath import FastPath
from envreg.http.serving import QuietServer
from envreg.protocol import KEEP_ALIVE_SECONDS
from envreg.runtime.backends.base import Upstream
from envreg.runtime.fastlane import Lane
from envreg.runtime.gateway import Gateway

pytestmark = pytest.mark.anyio


@dataclass
class Route:
    """The routing record the gateway looks sandboxes up by (id, token, where its server is)."""

    id: str
    token: str
    upstream: Upstream | None
    ended: str | None = None


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory):
    token = secrets.token_urlsafe(12)
    socket = tmp_path_factory.mktemp("counter") / "agent.sock"  # the counter also serves on a Unix socket
    # one argument: a urlsafe token may begin with "-", which argparse would take for an option
    started = {
        COUNTER: EnvServerProcess(COUNTER, extra=[f"--agent-token={token}", f"--agent-socket={socket}"]),
        "calendar": EnvServerProcess("calendar", extra=[f"--agent-token={token}"]),
    }
    for server in started.values():
        server.start()
    yield token, started
    stop_all(started.values())


@asynccontextmanager
async def served(app: object, path: FastPath, keep_alive: int = 5) -> AsyncIterator[int]:
    """`app` served by uvicorn in the test's loop on a loopback port, `path` in front; yields the port."""
    import uvicorn

    config = uvicorn.Config(
        app, host="127.0.0.1", port=0, lifespan="off", log_level="warning", http=path.protocol(),
        timeout_keep_alive=keep_alive,
    )  # type: ignore[arg-type]  # fmt: skip
    server = QuietServer(config)
    task = asyncio.get_running_loop().create_task(server.serve())
    while not server.started:
        await anyio.sleep(0.01)
    try:
        yield server.servers[0].sockets[0].getsockname()[1]
    finally:
        server.should_exit = True
        await task


class LanedGateway:
    def __init__(self, routes: dict[str, Route], timeout: float = 30.0, max_body: int = 1 << 20) -> None:
        self.routes = routes
        self.lane = Lane(routes.get, max_body=max_body, timeout=timeout)
        self.http = httpx2.AsyncClient()
        self.gateway = Gateway(routes.get, self.http, max_body=max_body)
        self.port = 0

    async def __aenter__(self) -> LanedGateway:
        self._served = served(self.gateway, self.lane)
        self.port = await self._served.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._served.__aexit__(None, None, None)
        self.lane.close()
        await self.http.aclose()

    def url(self, route: Route) -> str:
        return f"http://127.0.0.1:{self.port}/sandboxes/{route.id}/mcp"


def route_to(server: EnvServerProcess, token: str, path: str = "/mcp") -> Route:
    upstream = Upstream("127.0.0.1", server.port, path, token, f"srv-{server.port}")
    return Route("sb_" + secrets.token_hex(8), secrets.token_urlsafe(16), upstream)


def raw_call(route: Route, port: int, tool: str = "get", extra: bytes = b"", rid: int = 1) -> bytes:
    body, headers = modern_request("tools/call", {"name": tool, "arguments": {}}, rid=rid)
    data = json.dumps(body).encode()
    head = f"POST /sandboxes/{route.id}/mcp HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    head += f"authorization: Bearer {route.token}\r\ncontent-length: {len(data)}\r\n"
    return head.encode() + extra + b"\r\n" + data


class _Answers:
    """httptools callbacks collecting complete answers (any framing) from a raw connection."""

    def __init__(self) -> None:
        self.done: list[tuple[int, bytes]] = []
        self.heads: list[list[tuple[bytes, bytes]]] = []
        """Each answer's headers, names lowercased."""
        self.parser = httptools.HttpResponseParser(self)
        self._body = b""

    def on_message_begin(self) -> None:
        self._body = b""
        self.heads.append([])

    def on_header(self, name: bytes, value: bytes) -> None:
        self.heads[-1].append((name.lower(), value))

    def on_body(self, body: bytes) -> None:
        self._body += body

    def on_message_complete(self) -> None:
        self.done.append((self.parser.get_status_code(), self._body))


async def read_answers(stream: anyio.abc.ByteStream, n: int) -> list[tuple[int, bytes]]:
    """`n` HTTP/1.1 answers from a raw connection."""
    return (await receive(stream, n)).done


async def receive(stream: anyio.abc.ByteStream, n: int) -> _Answers:
    """`n` HTTP/1.1 answers from a raw connection, their headers too."""
    answers = _Answers()
    while len(answers.done) < n:
        answers.parser.feed_data(await stream.receive())
    return answers


@pytest.mark.parametrize("era", ERAS)
async def test_an_mcp_client_plays_a_scenario_through_the_lane(servers, era) -> None:
    token, started = servers
    env = load_environment("calendar")
    scenario = load_scenarios(env.folder)[0][0]
    route = route_to(started["calendar"], token)
    created = http_request(
        "POST",
        f"{started['calendar'].control_url}/instances",
        json={"state": scenario.initial_state} if scenario.initial_state else {},
        headers=started["calendar"].auth,
    ).json()
    route.upstream = Upstream("127.0.0.1", started["calendar"].port, created["mcp_path"], token, "srv")
    async with LanedGateway({route.id: route}) as gw:
        async with mcp_client(gw.url(route), era, token=route.token) as client:
            assert await run_steps(scenario, caller(client)) == []
        # the modern era is all plain POSTs: every one of them took the lane; the session era's
        # event stream (GET) and session end (DELETE) went through ASGI
        assert gw.lane.calls >= len(scenario.steps)


async def test_answers_are_the_servers_own(servers) -> None:
    token, started = servers
    route = route_to(started[COUNTER], token)
    async with LanedGateway({route.id: route}) as gw:
        body, headers = modern_request("tools/list")
        async with httpx2.AsyncClient() as http:  # an async client: the gateway runs in this loop
            via = await http.post(
                gw.url(route), json=body, headers={**headers, "authorization": f"Bearer {route.token}"}
            )
            direct = await http.post(
                f"{started[COUNTER].url}/mcp",
                json=body,
                headers={**headers, "authorization": f"Bearer {token}"},
            )
        assert via.status_code == direct.status_code == 200
        assert via.json() == direct.json()
        assert via.headers["content-type"] == direct.headers["content-type"]
        assert gw.lane.calls == 1


@pytest.mark.parametrize(
    ("change", "status"),
    [
        ({"authorization": "Bearer wrong"}, {401}),
        ({"authorization": None}, {401}),
        ({"origin": "http://127.0.0.1:9"}, {200, 403}),  # whatever the gateway's Origin rule says
        ({"host": "example.test"}, {200, 421}),  # whatever the gateway's Host rule says
        ({"transfer-encoding": "chunked"}, {200}),
    ],
)
async def test_what_the_lane_does_not_take_goes_through_asgi(servers, change, status) -> None:
    token, started = servers
    route = route_to(started[COUNTER], token)
    async with LanedGateway({route.id: route}) as gw:
        body, headers = modern_request("tools/call", {"name": "get", "arguments": {}})
        headers = {**headers, "authorization": f"Bearer {route.token}", **change}
        headers = {k: v for k, v in headers.items() if v is not None}
        data = json.dumps(body).encode()
        content = (b"%x\r\n%b\r\n0\r\n\r\n" % (len(data), data)) if "transfer-encoding" in change else data
        async with await anyio.connect_tcp("127.0.0.1", gw.port) as stream:
            head = f"POST /sandboxes/{route.id}/mcp HTTP/1.1\r\n"
            head += "".join(f"{k}: {v}\r\n" for k, v in headers.items() if k != "host")
            head += f"host: {headers.get('host', f'127.0.0.1:{gw.port}')}\r\n"
            if "transfer-encoding" not in change:
                head += f"content-length: {len(data)}\r\n"
            await stream.send(head.encode() + b"\r\n" + content)
            buffer = b""
            while b"\r\n\r\n" not in buffer:
                buffer += await stream.receive()
        assert int(buffer.split(b" ")[1]) in status, buffer
        assert gw.lane.calls == 0


async def test_an_unknown_or_ended_sandbox_is_answered_by_the_gateway(servers) -> None:
    token, started = servers
    route = route_to(started[COUNTER], token)
    ended = route_to(started[COUNTER], token)
    ended.ended = "its lease expired"
    async with LanedGateway({route.id: route, ended.id: ended}) as gw:
        unknown = Route("sb_" + "0" * 16, route.token, None)
        for target in (unknown, ended):
            async with await anyio.connect_tcp("127.0.0.1", gw.port) as stream:
                await stream.send(raw_call(target, gw.port))
                [(status, body)] = await read_answers(stream, 1)
            assert status == 404
        assert b"lease expired" in body and gw.lane.calls == 0


async def test_pipelined_calls_are_answered_in_order_then_asgi_takes_over(servers) -> None:
    token, started = servers
    route = route_to(started[COUNTER], token)
    async with LanedGateway({route.id: route}) as gw:
        async with await anyio.connect_tcp("127.0.0.1", gw.port) as stream:
            bad = raw_call(route, gw.port, rid=3).replace(route.token.encode(), b"nope")
            await stream.send(raw_call(route, gw.port, rid=1) + raw_call(route, gw.port, rid=2) + bad)
            answers = await read_answers(stream, 3)
            await stream.send(raw_call(route, gw.port, rid=4))  # after leaving the lane: ASGI, still right
            answers += await read_answers(stream, 1)
        assert [s for s, _ in answers] == [200, 200, 401, 200]
        assert [json.loads(b)["id"] for s, b in answers if s == 200] == [1, 2, 4]
        assert gw.lane.calls == 2


async def test_a_large_body_leaves_the_lane_and_gets_413(servers) -> None:
    token, started = servers
    route = route_to(started[COUNTER], token)
    async with LanedGateway({route.id: route}, max_body=1024) as gw:
        big = raw_call(route, gw.port).replace(
            b'"arguments": {}', b'"arguments": {"pad": "' + b"x" * 4000 + b'"}'
        )
        big = big.replace(b"content-length: ", b"content-length: 9999999\r\nx-old-length: ", 1)
        async with await anyio.connect_tcp("127.0.0.1", gw.port) as stream:
            await stream.send(big.split(b"\r\n\r\n")[0] + b"\r\n\r\n")
            [(status, _)] = await read_answers(stream, 1)
        assert status == 413 and gw.lane.calls == 0


async def test_the_server_gets_its_own_host_token_and_generation_and_no_hop_by_hop_header() -> None:
    """What the lane writes upstream, read off the wire: the client's end-to-end headers, the server's
    Host and token instead of the client's, the generation the gateway pins (a client's own is dropped),
    no hop-by-hop header, and a Content-Length that frames the body; and back to the client, the
    server's headers but its hop-by-hop ones, and the gateway's own keep-alive."""
    received: list[bytes] = []

    async def record(stream: anyio.abc.SocketStream) -> None:
        data = b""
        async with stream:
            while b"\r\n\r\n" not in data or len(data.partition(b"\r\n\r\n")[2]) < len(sent_body):
                data += await stream.receive()
            received.append(data)
            answer = b'{"jsonrpc":"2.0","id":1,"result":{}}'
            await stream.send(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
                              b"keep-alive: timeout=5\r\nx-answer: kept\r\n\r\n%b" % (len(answer), answer))  # fmt: skip

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    route = Route("sb_" + secrets.token_hex(8), "client-token",
                  Upstream("127.0.0.1", port, "/i/in_1/mcp", "server-token", "x", generation=3))  # fmt: skip
    extra = (b"Mcp-Session-Id:  s-1 \r\nkeep-alive: timeout=9\r\nte: trailers\r\nproxy-authorization: Basic eA==\r\n"
             b"x-envreg-generation: 0\r\nX-Trace: Case-Kept\r\n")  # fmt: skip
    request = raw_call(route, 1, extra=extra)
    sent_body = request.partition(b"\r\n\r\n")[2]
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, record)
        async with LanedGateway({route.id: route}) as gw:
            async with await anyio.connect_tcp("127.0.0.1", gw.port) as stream:
                await stream.send(request.replace(b"127.0.0.1:1", b"127.0.0.1:%d" % gw.port))
                answers = await receive(stream, 1)
                [(status, body)], [answer_headers] = answers.done, answers.heads
            assert gw.lane.calls == 1
        tg.cancel_scope.cancel()
    assert status == 200 and json.loads(body)["id"] == 1
    head, _, forwarded_body = received[0].partition(b"\r\n\r\n")
    request_line, *lines = head.split(b"\r\n")
    headers = [(name.lower(), value.strip()) for name, _, value in (line.partition(b":") for line in lines)]
    assert request_line == b"POST /i/in_1/mcp HTTP/1.1" and forwarded_body == sent_body
    assert sorted(headers) == sorted([
        (b"host", b"127.0.0.1:%d" % port), (b"authorization", b"Bearer server-token"),
        (b"x-envreg-generation", b"3"), (b"content-length", b"%d" % len(sent_body)),
        *[(name.encode(), value.encode()) for name, value in modern_request("tools/call", {"name": "get"})[1].items()],
        (b"mcp-session-id", b"s-1"), (b"x-trace", b"Case-Kept"),
    ])  # fmt: skip
    assert (b"x-answer", b"kept") in answer_headers and (
        b"content-type",
        b"application/json",
    ) in answer_headers
    assert [value for name, value in answer_headers if name == b"keep-alive"] == [
        b"timeout=%d" % KEEP_ALIVE_SECONDS
    ]


async def test_a_server_that_does_not_answer_gets_a_504_naming_the_wait() -> None:
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        route = Route(
            "sb_" + secrets.token_hex(8),
            "tok",
            Upstream("127.0.0.1", silent.getsockname()[1], "/mcp", None, "x"),
        )
        async with LanedGateway({route.id: route}, timeout=0.3) as gw:
            async with await anyio.connect_tcp("127.0.0.1", gw.port) as stream:
                await stream.send(raw_call(route, gw.port))
                [(status, body)] = await read_answers(stream, 1)
        # a JSON-RPC error, for the call's id, that every MCP client shows
        error = json.loads(body)
        assert status == 504 and error["id"] == 1 and error["error"]["code"] == -32603, error
        assert "no answer in 0.3 s" in error["error"]["message"]
        assert error["error"]["data"] == {"sandbox": route.id, "state": "no answer"}


async def test_each_call_gets_its_whole_wait_and_nothing_is_left_waiting() -> None:
    """One timer serves the lane's deadlines: a call started later than another is not cut short when
    the earlier one times out, and once both are answered nothing waits and no timer is left."""
    loop = asyncio.get_running_loop()
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        route = Route("sb_" + secrets.token_hex(8), "tok",
                      Upstream("127.0.0.1", silent.getsockname()[1], "/mcp", None, "x"))  # fmt: skip
        async with LanedGateway({route.id: route}, timeout=0.4) as gw:
            waits: list[float] = []

            async def call(delay: float) -> None:
                await anyio.sleep(delay)
                async with await anyio.connect_tcp("127.0.0.1", gw.port) as stream:
                    sent = loop.time()
                    await stream.send(raw_call(route, gw.port))
                    [(status, _)] = await read_answers(stream, 1)
                assert status == 504
                waits.append(loop.time() - sent)

            async with anyio.create_task_group() as tg:
                for delay in (0.0, 0.2):
                    tg.start_soon(call, delay)
            assert len(waits) == 2 and min(waits) >= 0.39, waits
            assert not gw.lane.waiting and gw.lane._sweep is None


async def test_a_server_that_is_gone_gets_a_502() -> None:
    with socket.socket() as gone:
        gone.bind(("127.0.0.1", 0))
        port = gone.getsockname()[1]
    route = Route("sb_" + secrets.token_hex(8), "tok", Upstream("127.0.0.1", port, "/mcp", None, "x"))
    async with LanedGateway({route.id: route}) as gw:
        async with await anyio.connect_tcp("127.0.0.1", gw.port) as stream:
            await stream.send(raw_call(route, gw.port))
            [(status, body)] = await read_answers(stream, 1)
    error = json.loads(body)
    assert status == 502 and "did not answer" in error["error"]["message"], error
    assert error["error"]["data"] == {"sandbox": route.id, "state": "unreachable"}


async def test_a_dropped_pooled_connection_is_retried_on_a_new_one(servers) -> None:
    token, started = servers
    route = route_to(started[COUNTER], token)
    async with LanedGateway({route.id: route}) as gw:
        async with await anyio.connect_tcp("127.0.0.1", gw.port) as stream:
            await stream.send(raw_call(route, gw.port, rid=1))
            await read_answers(stream, 1)
            for conns in gw.lane.idle.values():  # the server side closes the pooled connection
                for conn in conns:  # through a dup of its fd: uvloop's transport socket has no shutdown()
                    fd = conn.transport.get_extra_info("socket").fileno()
                    with socket.socket(fileno=os.dup(fd)) as sock:
                        sock.shutdown(socket.SHUT_RD)
            await stream.send(raw_call(route, gw.port, rid=2))
            [(status, body)] = await read_answers(stream, 1)
        assert status == 200 and json.loads(body)["id"] == 2


async def test_a_client_that_leaves_mid_call_leaves_nothing_behind(servers) -> None:
    token, started = servers
    route = route_to(started[COUNTER], token)
    async with LanedGateway({route.id: route}) as gw:
        for _ in range(20):
            async with await anyio.connect_tcp("127.0.0.1", gw.port) as stream:
                await stream.send(raw_call(route, gw.port))
        await anyio.sleep(0.2)
        async with await anyio.connect_tcp("127.0.0.1", gw.port) as stream:
            await stream.send(raw_call(route, gw.port))
            [(status, _)] = await read_answers(stream, 1)
        assert status == 200
        assert sum(len(c) for c in gw.lane.idle.values()) <= 2


async def test_a_server_with_a_unix_socket_is_reached_on_it(servers, tmp_path) -> None:
    token, started = servers
    counter = started[COUNTER]
    [path] = [arg.split("=", 1)[1] for arg in counter.extra if arg.startswith("--agent-socket=")]
    closed = socket.create_server(("127.0.0.1", 0))  # a port nobody answers on: TCP would be a 502
    port = closed.getsockname()[1]
    closed.close()
    route = Route("sb_" + secrets.token_hex(8), secrets.token_urlsafe(16),
                  Upstream("127.0.0.1", port, "/mcp", token, "srv", socket=path))  # fmt: skip
    gone = Route("sb_" + secrets.token_hex(8), secrets.token_urlsafe(16),
                 Upstream("127.0.0.1", counter.port, "/mcp", token, "srv", socket=str(tmp_path / "no.sock")))  # fmt: skip
    async with LanedGateway({route.id: route, gone.id: gone}) as gw:
        async with await anyio.connect_tcp("127.0.0.1", gw.port) as stream:
            for rid in (1, 2):
                await stream.send(raw_call(route, gw.port, rid=rid))
                [(status, body)] = await read_answers(stream, 1)
                assert status == 200 and json.loads(body)["id"] == rid
            await stream.send(raw_call(gone, gw.port, rid=3))
            [(status, body)] = await read_answers(stream, 1)
        assert gw.lane.calls == 3
        [key] = [k for k, conns in gw.lane.idle.items() if conns]  # one pooled connection, on the socket
        assert key[-1] == path
    assert status == 502 and "no.sock" not in body.decode()  # the gateway's error, not the host's paths
    assert f"sandbox {gone.id} did not answer" in json.loads(body)["error"]["message"]
