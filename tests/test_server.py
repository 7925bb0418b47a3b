"""The environment server over real HTTP on loopback, driven by the `mcp` SDK's client."""

from __future__ import annotations

import json

import anyio
import pytest
from conftest import COUNTER, REFERENCE_ENVS, scaled
from mcp import MCPError
from mcp_helpers import ERAS, caller, mcp_client
from servers import modern_request

from envreg.env import load_environment, load_scenarios, states_equal
from envreg.env.scenario import run_steps
from envreg.http.client import request as http_request
from envreg.manifest import build_manifest

pytestmark = pytest.mark.anyio


def scenario_cases() -> list:
    out = []
    for name in REFERENCE_ENVS:
        scenarios, _ = load_scenarios(load_environment(name).folder)
        out += [pytest.param(name, s, era, id=f"{name}-{s.name}-{era}") for s in scenarios for era in ERAS]
    return out


@pytest.mark.parametrize(("name", "scenario", "era"), scenario_cases())
async def test_scenarios_pass_over_mcp(env_server, name, scenario, era) -> None:
    server = env_server(name)
    instance = server.new_instance(scenario.initial_state)
    async with mcp_client(server.mcp_url(instance), era) as client:
        assert await run_steps(scenario, caller(client)) == []
    if scenario.final_state is not None:
        env = load_environment(name)
        assert states_equal(server.state(instance)["state"], scenario.final_state, env.volatile)


@pytest.mark.parametrize("name", REFERENCE_ENVS)
async def test_every_tool_succeeds_in_some_scenario_over_mcp(env_server, name) -> None:
    """Each tool that `tools/list` names over MCP has a scenario step that must answer it with a result; that
    every step answers as it must over MCP, in both eras, is `test_scenarios_pass_over_mcp` (so the scenarios
    are not played a third time here)."""
    server = env_server(name)
    scenarios, _ = load_scenarios(load_environment(name).folder)
    succeeding = {step.tool for scenario in scenarios for step in scenario.steps if step.expect_error is None}
    async with mcp_client(f"{server.url}/mcp", "2026-07-28") as client:
        listed = {t.name for t in (await client.list_tools()).tools}
    assert len(listed) == len(load_environment(name).tools)
    assert listed - succeeding == set(), (
        f"tools no scenario calls successfully: {sorted(listed - succeeding)}"
    )


@pytest.mark.parametrize("name", REFERENCE_ENVS)
@pytest.mark.parametrize("era", ERAS)
async def test_tool_list_equals_manifest(env_server, name, era) -> None:
    server = env_server(name)
    async with mcp_client(f"{server.url}/mcp", era) as client:
        listed = (await client.list_tools()).tools
    manifest = build_manifest(load_environment(name))
    wire = [t.model_dump(by_alias=True, exclude_none=True, mode="json") for t in listed]
    assert [t["name"] for t in wire] == [t.name for t in manifest.tools]
    for got, spec in zip(wire, manifest.tools, strict=True):
        assert got["inputSchema"] == spec.input_schema
        assert got.get("outputSchema") == spec.output_schema
        assert got["annotations"] == spec.annotations
        assert got["description"] == spec.description


@pytest.mark.slow
async def test_fifty_instances_each_keep_their_own_state(env_server) -> None:
    server = env_server(COUNTER)
    ids = [server.new_instance() for _ in range(scaled(50, 12))]

    async def drive(i: int, instance: str) -> None:
        era = list(ERAS)[i % 2]
        async with mcp_client(server.mcp_url(instance), era) as client:
            for step in range(20):
                result = await client.call_tool("increment", {"by": i + 1 + step % 3})
                assert not result.is_error

    async with anyio.create_task_group() as tg:
        for i, instance in enumerate(ids):
            tg.start_soon(drive, i, instance)

    env = load_environment(COUNTER)
    for i, instance in enumerate(ids):
        expected = env.instance()
        for step in range(20):
            expected.call_tool("increment", {"by": i + 1 + step % 3})
        assert server.state(instance)["sha256"] == expected.state.sha256(), f"instance {i} diverged"


@pytest.mark.parametrize("era", ERAS)
async def test_invalid_arguments_are_an_error_result_and_change_nothing(env_server, era) -> None:
    server = env_server("calendar")
    instance = server.new_instance()
    before = server.state(instance)["sha256"]
    tool = next(iter(load_environment("calendar").tools.values()))
    bad_argument = "no_such_argument"
    async with mcp_client(server.mcp_url(instance), era) as client:
        result = await client.call_tool(tool.name, {bad_argument: 1})
    assert result.is_error
    assert bad_argument in result.content[0].text
    assert server.state(instance)["sha256"] == before


@pytest.mark.parametrize("era", ERAS)
async def test_a_wrongly_typed_argument_is_named(env_server, era) -> None:
    server = env_server(COUNTER)
    instance = server.new_instance()
    before = server.state(instance)["sha256"]
    async with mcp_client(server.mcp_url(instance), era) as client:
        result = await client.call_tool("increment", {"by": "three"})
        failed = await client.call_tool("increment", {"by": -1})
    assert result.is_error and "by" in result.content[0].text
    assert failed.is_error and "positive" in failed.content[0].text
    assert server.state(instance)["sha256"] == before


@pytest.mark.parametrize("era", ERAS)
async def test_unknown_tool_is_a_protocol_error(env_server, era) -> None:
    server = env_server(COUNTER)
    async with mcp_client(f"{server.url}/mcp", era) as client:
        with pytest.raises(MCPError) as info:
            await client.call_tool("no_such_tool", {})
    assert info.value.code == -32602
    assert "no_such_tool" in info.value.message


async def test_malformed_json_is_http_400(env_server) -> None:
    server = env_server(COUNTER)
    _, headers = modern_request("tools/list")
    r = http_request("POST", f"{server.url}/mcp", content=b'{"jsonrpc": "2.0", "id": 1,', headers=headers)
    assert r.status_code == 400
    assert r.json()["error"]["code"] == -32700


async def test_oversized_body_is_413_on_both_planes(env_server) -> None:
    server = env_server(COUNTER, True, "--max-body", "2048")
    body, headers = modern_request("tools/call", {"name": "increment", "arguments": {"by": 1}})
    body["params"]["padding"] = "x" * 4096
    r = http_request("POST", f"{server.url}/mcp", json=body, headers=headers)
    assert r.status_code == 413
    r = http_request(
        "POST",
        f"{server.control_url}/instances",
        json={"state": {"value": 1}, "id": "x" * 4000},
        headers=server.auth,
    )
    assert r.status_code == 413


async def test_invalid_state_is_422_and_the_old_state_is_kept(env_server) -> None:
    server = env_server(COUNTER)
    instance = server.new_instance({"value": 5})
    before = server.state(instance)
    r = http_request(
        "PUT", f"{server.control_url}/instances/{instance}/state", json={"value": "many"}, headers=server.auth
    )
    assert r.status_code == 422
    assert "value" in r.json()["error"]
    assert server.state(instance) == before
    r = http_request(
        "POST", f"{server.control_url}/instances", json={"state": {"nope": 1}}, headers=server.auth
    )
    assert r.status_code == 422


CONTROL_ROUTES = [
    ("GET", "/healthz"),
    ("GET", "/manifest"),
    ("GET", "/instances"),
    ("POST", "/instances"),
    ("GET", "/instances/default/state"),
    ("PUT", "/instances/default/state"),
    ("POST", "/instances/default/reset"),
    ("GET", "/instances/default/augmentation"),
    ("PUT", "/instances/default/augmentation"),
    ("DELETE", "/instances/default/augmentation"),
    ("DELETE", "/instances/default"),
]


@pytest.mark.parametrize(("method", "path"), CONTROL_ROUTES)
@pytest.mark.parametrize("token", [None, "wrong-token"])
async def test_control_plane_requires_the_token(env_server, method, path, token) -> None:
    server = env_server(COUNTER)
    headers = {"authorization": f"Bearer {token}"} if token else {}
    r = http_request(method, f"{server.control_url}{path}", headers=headers, json={})
    assert r.status_code == 401
    assert r.headers["www-authenticate"] == "Bearer"


@pytest.mark.parametrize(("method", "path"), [*CONTROL_ROUTES, ("POST", "/i/default/reset")])
async def test_agent_plane_exposes_no_control_route(env_server, method, path) -> None:
    server = env_server(COUNTER)
    r = http_request(method, f"{server.url}{path}", headers=server.auth, json={})
    assert r.status_code == 404


async def test_unknown_instance_is_404(env_server) -> None:
    server = env_server(COUNTER)
    body, headers = modern_request("tools/list")
    r = http_request("POST", f"{server.url}/i/not-an-instance/mcp", json=body, headers=headers)
    assert r.status_code == 404


async def test_deleted_instance_is_gone_and_others_are_not(env_server) -> None:
    server = env_server(COUNTER)
    a, b = server.new_instance(), server.new_instance()
    r = http_request("DELETE", f"{server.control_url}/instances/{a}", headers=server.auth)
    assert r.status_code == 204
    body, headers = modern_request("tools/call", {"name": "get", "arguments": {}})
    assert http_request("POST", server.mcp_url(a), json=body, headers=headers).status_code == 404
    assert http_request("POST", server.mcp_url(b), json=body, headers=headers).status_code == 200


async def test_reset_returns_to_the_seed(env_server) -> None:
    server = env_server(COUNTER)
    instance = server.new_instance()
    seed = server.state(instance)
    async with mcp_client(server.mcp_url(instance), "2026-07-28") as client:
        await client.call_tool("increment", {"by": 3})
    assert server.state(instance) != seed
    r = http_request("POST", f"{server.control_url}/instances/{instance}/reset", headers=server.auth)
    assert r.status_code == 200 and r.json() == seed


async def test_manifest_and_health_are_served(env_server) -> None:
    server = env_server("bank")
    r = http_request("GET", f"{server.control_url}/manifest", headers=server.auth)
    assert r.status_code == 200
    assert r.json()["digests"]["manifest"] == build_manifest(load_environment("bank")).digest
    health = http_request("GET", f"{server.control_url}/healthz", headers=server.auth).json()
    assert health["status"] == "ok" and health["env"] == "bank"


async def test_replaying_a_scenario_twice_gives_the_same_hash(env_server) -> None:
    server = env_server("airline")
    scenario = load_scenarios(load_environment("airline").folder)[0][-1]
    hashes = []
    for _ in range(2):
        instance = server.new_instance(scenario.initial_state)
        async with mcp_client(server.mcp_url(instance), "2026-07-28") as client:
            await run_steps(scenario, caller(client))
        hashes.append(server.state(instance)["sha256"])
    assert hashes[0] == hashes[1]


async def test_state_dump_then_load_then_next_call_equals_the_uninterrupted_run(env_server) -> None:
    server = env_server(COUNTER)
    straight, resumed = server.new_instance(), server.new_instance()
    async with mcp_client(server.mcp_url(straight), "2026-07-28") as client:
        for by in (1, 2, 3):
            await client.call_tool("increment", {"by": by})
    async with mcp_client(server.mcp_url(resumed), "2026-07-28") as client:
        for by in (1, 2):
            await client.call_tool("increment", {"by": by})
    dumped = server.state(resumed)
    await_fresh = server.new_instance()
    r = http_request(
        "PUT",
        f"{server.control_url}/instances/{await_fresh}/state",
        content=json.dumps(dumped["state"]),
        headers=server.auth,
    )
    assert r.status_code == 200 and r.json()["sha256"] == dumped["sha256"]
    async with mcp_client(server.mcp_url(await_fresh), "2026-07-28") as client:
        await client.call_tool("increment", {"by": 3})
    assert server.state(await_fresh)["sha256"] == server.state(straight)["sha256"]


async def test_agent_plane_errors_are_jsonrpc_for_mcp_requests(env_server) -> None:
    """An MCP client gets a JSON-RPC error it can show; anything else gets {"error": ...}."""
    server = env_server(COUNTER, True, "--agent-token", "agent-secret")
    body, headers = modern_request("tools/list")
    r = http_request("POST", f"{server.url}/mcp", json=body, headers=headers)
    assert r.status_code == 401 and r.json()["error"]["code"] == -32600, r.text
    assert "answers only its runtime" in r.json()["error"]["message"]
    auth = {**headers, "authorization": "Bearer agent-secret"}
    r = http_request("POST", f"{server.url}/elsewhere", json=body, headers=auth)
    assert r.status_code == 404 and r.json()["error"]["message"].startswith("not found: MCP endpoints are")
    r = http_request("GET", f"{server.url}/elsewhere", headers={"authorization": "Bearer agent-secret"})
    assert r.status_code == 404 and r.json() == {
        "error": "not found: MCP endpoints are /mcp and /i/<instance>/mcp"
    }
