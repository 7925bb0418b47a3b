"""Unknown-tool calls through the gateway are refused at once, also with many in flight in a sandbox short of CPU.

A sandbox's environment server answers plain tool calls on its lean path and starts the `mcp` SDK only
for what that path hands on (an import of a second or more of CPU). Unknown tools used to be handed on:
on a loaded host the SDK's start outlasted the gateway's 30 s, so each unknown-tool call got a 504
while valid calls were answered at once. The lean path now refuses them itself, as the SDK does.
"""

from __future__ import annotations

import subprocess
import time
from typing import Any

import anyio
import httpx2
import pytest
from mcp.shared.exceptions import MCPError
from mcp_helpers import mcp_client
from servers import modern_request

from envreg.runtime import Runtime

pytestmark = [pytest.mark.docker, pytest.mark.anyio]

ENV = "bfcl-trading-bot"
STARVED_CPUS = "0.02"
"""The sandbox's CPU share while the calls are in flight: a loaded host (the SDK's start takes over 30 s)."""
CALLS = 90
"""Calls in flight at once: two unknown tools for every valid call."""
ANSWERED_WITHIN = 15.0
"""Seconds every answer may take in the starved sandbox (valid calls take a few)."""
VALID = [
    ("get_stock_info", {"symbol": "AAPL"}),
    ("get_current_time", {}),
    ("get_available_stocks", {"sector": "Technology"}),
]


@pytest.fixture(autouse=True)
def _images(reference_images) -> None:
    pass


def set_cpus(sb: Any, cpus: str) -> None:
    subprocess.run(["docker", "update", "--cpus", cpus, sb.server.id], check=True, capture_output=True)


def call(i: int) -> tuple[str, dict[str, Any]]:
    """The i-th call of the burst: a valid one every third, else a tool the environment lacks."""
    return VALID[i // 3 % len(VALID)] if i % 3 == 2 else (f"no_such_tool_{i}", {"symbol": "AAPL"})


async def post(http: httpx2.AsyncClient, sb: Any, i: int) -> tuple[int, dict[str, Any], float]:
    """POST call `i` (JSON-RPC id `i`); its status, decoded answer and seconds taken (`inf`: no answer)."""
    name, arguments = call(i)
    body, headers = modern_request("tools/call", {"name": name, "arguments": arguments}, rid=i)
    started = time.monotonic()
    try:
        r = await http.post(sb.mcp_url, json=body, headers={**headers, "authorization": f"Bearer {sb.token}"})
    except httpx2.TimeoutException:
        return 0, {}, float("inf")
    return r.status_code, r.json(), time.monotonic() - started


async def burst(sb: Any) -> list[tuple[int, dict[str, Any], float]]:
    limits = httpx2.Limits(max_connections=CALLS, max_keepalive_connections=CALLS)
    async with httpx2.AsyncClient(timeout=ANSWERED_WITHIN, limits=limits) as http:
        answers: list[Any] = [None] * CALLS

        async def one(i: int) -> None:
            answers[i] = await post(http, sb, i)

        async with anyio.create_task_group() as tg:
            for i in range(CALLS):
                tg.start_soon(one, i)
    return answers


def check_refusal(i: int, status: int, answer: dict[str, Any], tools: list[str]) -> None:
    name = call(i)[0]
    assert status == 400, (i, status, answer)
    assert answer["id"] == i and answer["error"]["code"] == -32602, answer
    assert answer["error"]["message"] == f"Unknown tool: {name!r}; this environment has: {', '.join(tools)}"


@pytest.mark.parametrize("isolation", ["container", "instance"])
async def test_unknown_tools_are_refused_at_once_with_many_in_flight(isolation: str) -> None:
    async with Runtime() as rt:
        sb = await rt.sandbox(ENV, isolation=isolation)
        tools = sorted(t["name"] for t in await sb.list_tools())
        before = await sb.state_sha256()
        set_cpus(sb, STARVED_CPUS)
        try:
            answers = await burst(sb)
        finally:
            set_cpus(sb, "1")
        late = [(i, s) for i, (_, _, s) in enumerate(answers) if s > ANSWERED_WITHIN]
        assert not late, f"{len(late)} of {CALLS} calls had no answer in {ANSWERED_WITHIN:g} s: {late[:5]}"
        for i, (status, answer, _) in enumerate(answers):
            if i % 3 == 2:
                assert status == 200 and answer["id"] == i, (i, status, answer)
                assert answer["result"]["isError"] is False, answer
            else:
                check_refusal(i, status, answer, tools)
        assert await sb.state_sha256() == before
        # the MCP SDK's own client shows the refusal as the error it is
        async with mcp_client(sb.mcp_url, "2026-07-28", token=sb.token) as client:
            with pytest.raises(
                MCPError, match=r"Unknown tool: 'sell_everything'; this environment has: add_to"
            ):
                await client.call_tool("sell_everything", {})
            assert not (await client.call_tool("get_current_time", {})).is_error
        assert await sb.state_sha256() == before
