"""A call of a tool the instance lacks is refused on the lean path, as the `mcp` SDK refuses it, without
the SDK: a server whose SDK has not started (an import of a second or more of CPU, longer on a loaded
host) answers it at once. The Docker side, through the gateway: tests/test_gateway_unknown_tool.py."""

from __future__ import annotations

import base64
import json

import anyio
import httpx2
import pytest
from conftest import COUNTER
from servers import ANSWER_S, modern_request

from envreg.http.client import request as http_request
from envreg.protocol import DEFAULT_INSTANCE
from envreg.server.app import EnvServer, ServerConfig
from envreg.server.lean import header_name


def unknown_call(name: str, rid: int = 1) -> tuple[dict, dict]:
    return modern_request("tools/call", {"name": name, "arguments": {"by": 1}}, rid=rid)


def _wrapped(name: str) -> str:
    """A header value as the SDK's clients write a name that is not plain ASCII."""
    return f"=?base64?{base64.b64encode(name.encode()).decode()}?="


@pytest.mark.anyio
async def test_unknown_tools_are_refused_while_the_sdk_has_not_started() -> None:
    server = EnvServer.build(ServerConfig(env=COUNTER, token="t"))  # its SDK never starts here
    transport = httpx2.ASGITransport(app=server.agent)
    async with httpx2.AsyncClient(transport=transport, base_url="http://127.0.0.1:1") as http:
        answers: dict[int, httpx2.Response] = {}

        async def post(rid: int) -> None:
            name = "increment" if rid % 3 == 0 else f"no_such_tool_{rid}" if rid % 3 == 1 else f"工具_{rid}"
            body, headers = unknown_call(name, rid)
            headers["mcp-name"] = _wrapped(name) if rid % 3 == 2 else name
            answers[rid] = await http.post("/mcp", json=body, headers=headers)

        with anyio.fail_after(10):  # a request handed to the SDK would wait for its start: for ever here
            async with anyio.create_task_group() as tg:
                for rid in range(60):
                    tg.start_soon(post, rid)
    for rid, r in answers.items():
        if rid % 3 == 0:
            assert r.status_code == 200 and r.json()["result"]["isError"] is False, r.text
            continue
        assert r.status_code == 400 and r.headers["content-type"] == "application/json", r.text
        name = f"no_such_tool_{rid}" if rid % 3 == 1 else f"工具_{rid}"
        message = f"Unknown tool: {name!r}; this environment has: get, increment"
        assert r.json() == {"jsonrpc": "2.0", "id": rid, "error": {"code": -32602, "message": message}}
    assert server.store.get(DEFAULT_INSTANCE).state.value == 20  # the valid calls only


# (test id, tool name in the body, its Mcp-Name header): the SDK reads a `=?base64?...?=` header as the
# UTF-8 it wraps (its clients send a name that is not plain ASCII so), every other one verbatim
HEADER_FORMS = [
    ("plain", "no_such_tool", "no_such_tool"),
    ("wrapped-unicode", "获取股票信息", _wrapped("获取股票信息")),
    ("wrapped-ascii", "no_such_tool", _wrapped("no_such_tool")),
    ("wrapped-known-tool", "increment", _wrapped("increment")),
    ("wrapped-edge-space", " no_such_tool", _wrapped(" no_such_tool")),
    ("wrapped-mismatch", "no_such_tool", _wrapped("other")),
    ("wrapped-malformed", "no_such_tool", "=?base64?not base64!?="),
    ("wrapped-non-canonical", "a", "=?base64?YR==?="),
    ("sentinel-looking-name", "=?base64?x?=", "=?base64?x?="),
    ("raw-utf8", "é", "é".encode()),
    ("lone-surrogate", "\ud800", _wrapped("x")),
]


@pytest.mark.parametrize(("tool", "header"), [pytest.param(t, h, id=i) for i, t, h in HEADER_FORMS])
def test_unknown_tools_are_refused_as_the_sdk_refuses_them(env_server, tool: str, header) -> None:
    def exchange(server) -> tuple[int, object, str]:
        instance = server.new_instance()
        body, headers = unknown_call(tool)
        headers = {**headers, "mcp-name": header, "host": f"127.0.0.1:{server.port}"}
        r = http_request(
            "POST", server.mcp_url(instance), content=json.dumps(body), headers=headers, timeout=ANSWER_S
        )
        return r.status_code, r.json(), server.state(instance)["sha256"]

    lean, sdk = exchange(env_server(COUNTER, True)), exchange(env_server(COUNTER, False))
    assert lean == sdk


def test_header_names_are_read_as_the_sdk_reads_them() -> None:
    from mcp.shared.inbound import decode_header_value

    for _, _, header in HEADER_FORMS:
        raw = header if isinstance(header, bytes) else header.encode()
        assert header_name(raw) == decode_header_value(raw.decode("latin-1")), header
    assert header_name(None) is None
