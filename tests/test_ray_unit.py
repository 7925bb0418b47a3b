"""The Ray backend's parts that need no cluster: the node proxy, error transport, and clear refusals.

No Docker here. The proxy is what the runtime and its gateway talk to on every Ray node, so it is checked
on its own, against a real environment server on loopback, with the runtime's own client and the `mcp`
SDK's client in both protocol eras.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import httpx2
import pytest
import uvicorn
from conftest import COUNTER
from mcp_helpers import ERAS, mcp_client
from servers import free_port

from envreg.errors import (
    BadRequest,
    EngineError,
    ImageNotFound,
    InvalidState,
    SandboxGone,
    UnknownToolError,
    UpstreamError,
)
from envreg.http.serving import QuietServer
from envreg.runtime import Runtime
from envreg.runtime.backends.base import EnvSpec, Server
from envreg.runtime.backends.ray_node import decode_error, encode_error
from envreg.runtime.backends.ray_proxy import NodeProxy, server_path
from envreg.runtime.client import EnvClient

pytestmark = pytest.mark.anyio
SECRET = "runtime-secret"
AGENT_TOKEN = "container-agent-token"


@pytest.fixture
def counter(env_server):
    """A real `envreg serve-env` whose agent plane requires its own token, as in a container."""
    return env_server(COUNTER, True, "--agent-token", AGENT_TOKEN)


@asynccontextmanager
async def proxy_for(servers: dict[str, Server]) -> AsyncIterator[tuple[str, httpx2.AsyncClient]]:
    """A node proxy over `servers`, served by uvicorn on loopback; yields its URL and an HTTP client."""
    async with httpx2.AsyncClient(timeout=10) as http:
        server = QuietServer(
            uvicorn.Config(
                NodeProxy(servers.get, SECRET, http),
                host="127.0.0.1",
                port=0,
                lifespan="off",
                log_level="warning",
            )
        )
        async with anyio.create_task_group() as tg:
            tg.start_soon(server.serve)
            while not server.started:
                await anyio.sleep(0.01)
            port = server.servers[0].sockets[0].getsockname()[1]
            try:
                yield f"http://127.0.0.1:{port}", http
            finally:
                server.should_exit = True


def server_at(http: httpx2.AsyncClient, agent_url: str, control_url: str, token: str) -> Server:
    """A server as a node agent holds it: its own client, with its own tokens."""
    return Server(
        id="c0ffee",
        spec=EnvSpec(key="k", name="counter", digest="d"),
        client=EnvClient(http, agent_url, control_url, token, AGENT_TOKEN),
        dedicated=False,
        agent_address=("127.0.0.1", 0),
        agent_token=AGENT_TOKEN,
    )


def through(proxy_url: str, http: httpx2.AsyncClient, secret: str = SECRET) -> EnvClient:
    """The runtime's client for server c0ffee, through the proxy, with the runtime's secret."""
    return EnvClient(
        http,
        proxy_url + server_path("c0ffee", "agent"),
        proxy_url + server_path("c0ffee", "control"),
        secret,
        secret,
    )


async def test_the_runtime_client_works_through_the_proxy(counter) -> None:
    servers: dict[str, Server] = {}
    async with proxy_for(servers) as (url, http):
        servers["c0ffee"] = server_at(http, counter.url, counter.control_url, counter.token)
        client = through(url, http)
        instance = await client.create_instance({"value": 5})
        assert (await client.call_tool(instance, "increment", {"by": 2})).value == 7
        assert (await client.call_tool(instance, "increment", {"by": -1})).is_error
        assert (await client.get_state(instance))["value"] == 7
        with pytest.raises(InvalidState) as refused:
            await client.put_state(instance, {"value": "not a number"})
        assert refused.value.errors and refused.value.errors[0]["loc"] == "value"
        assert (await client.get_state(instance))["value"] == 7
        with pytest.raises(UnknownToolError):
            await client.call_tool(instance, "no_such_tool", {})
        assert [t["name"] for t in await client.list_tools(instance)] == ["increment", "get"]
        await client.delete_instance(instance)
        with pytest.raises(SandboxGone):
            await client.get_state(instance)
        with pytest.raises(SandboxGone):
            await client.call_tool(instance, "get", {})


@pytest.mark.parametrize("era", ERAS)
async def test_an_mcp_client_works_through_the_proxy_in_both_eras(counter, era) -> None:
    servers: dict[str, Server] = {}
    async with proxy_for(servers) as (url, http):
        servers["c0ffee"] = server_at(http, counter.url, counter.control_url, counter.token)
        instance = counter.new_instance({"value": 41})
        mcp_url = url + server_path("c0ffee", "agent") + f"/i/{instance}/mcp"
        async with mcp_client(mcp_url, era, token=SECRET) as client:
            assert [t.name for t in (await client.list_tools()).tools] == ["increment", "get"]
            result = await client.call_tool("increment", {"by": 1})
            assert not result.is_error and result.content[0].text == "42"
        assert counter.state(instance)["state"]["value"] == 42


async def test_the_proxy_admits_only_the_runtime_secret(counter) -> None:
    servers: dict[str, Server] = {}
    async with proxy_for(servers) as (url, http):
        servers["c0ffee"] = server_at(http, counter.url, counter.control_url, counter.token)
        healthz = url + server_path("c0ffee", "control") + "/healthz"
        assert (await http.get(healthz, headers={"authorization": f"Bearer {SECRET}"})).status_code == 200
        for headers in ({}, {"authorization": "Bearer wrong"}, {"authorization": f"Bearer {counter.token}"}):
            refused = await http.get(healthz, headers=headers)
            assert refused.status_code == 401 and "runtime secret" in refused.json()["error"]
        agent = await http.post(url + server_path("c0ffee", "agent") + "/mcp", content=b"{}")
        assert (
            agent.status_code == 401 and agent.json()["error"]["message"] == "missing or wrong runtime secret"
        )
        unknown = await http.get(
            url + server_path("feed", "control") + "/healthz", headers={"authorization": f"Bearer {SECRET}"}
        )
        assert unknown.status_code == 404 and "no server feed" in unknown.json()["error"]
        assert (await http.get(url + "/servers/c0ffee/shell/x")).status_code == 404
        assert (await http.get(url + "/")).status_code == 404
        with pytest.raises(UpstreamError):  # the runtime's client says so plainly
            await through(url, http, secret="wrong").call_tool("default", "get", {})


async def test_a_server_that_does_not_answer_is_an_upstream_error() -> None:
    servers: dict[str, Server] = {}
    async with proxy_for(servers) as (url, http):
        dead = f"http://127.0.0.1:{free_port()}"
        servers["c0ffee"] = server_at(http, dead, dead, "t")
        client = through(url, http)
        with pytest.raises(UpstreamError, match="did not answer"):
            await client.call_tool("default", "get", {})
        with pytest.raises(UpstreamError, match="HTTP 502"):
            await client.get_state("default")


def test_envreg_errors_cross_the_cluster_with_class_message_and_details() -> None:
    invalid = decode_error(
        encode_error(InvalidState("invalid state, nothing was changed", [{"loc": ["value"]}], hint="fix it")),
        "on Ray node abc (10.0.0.2)",
    )
    assert type(invalid) is InvalidState and invalid.errors == [{"loc": ["value"]}]
    assert str(invalid) == "on Ray node abc (10.0.0.2): invalid state, nothing was changed; fix it"
    missing = decode_error(encode_error(ImageNotFound("no image calendar", "build it")), "on Ray node abc")
    assert isinstance(missing, ImageNotFound) and missing.status == 404 and missing.hint == "build it"
    tool = decode_error(encode_error(UnknownToolError("nope", ["get"])), "n")
    assert isinstance(tool, UnknownToolError) and tool.name == "nope" and "'nope'" in str(tool)
    foreign = decode_error({"type": "os:system", "message": "x"}, "n")
    assert type(foreign) is EngineError and str(foreign) == "n: x"


async def test_a_ray_address_nothing_answers_at_is_refused_at_once() -> None:
    pytest.importorskip("ray", reason="needs the `ray` extra")
    started = anyio.current_time()
    async with Runtime(backend="ray", address=f"127.0.0.1:{free_port()}") as rt:
        with pytest.raises(EngineError, match=r"no Ray cluster answers at 127\.0\.0\.1") as refused:
            await rt.sandbox("calendar", isolation="container")
    assert "ray status" in refused.value.hint and anyio.current_time() - started < 10


async def test_the_ray_backend_without_ray_says_how_to_install_it(monkeypatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "ray" else real(name, *a)
    )
    async with Runtime(backend="ray") as rt:
        with pytest.raises(BadRequest, match="needs Ray") as refused:
            await rt.sandbox("calendar", isolation="instance")
    assert "envreg[ray]" in refused.value.hint
