"""Size limits: oversized arguments and states are refused naming the limit, and nothing changes.

In process (the SDK, every tier's common ground) and over real HTTP (MCP agent plane, control plane)
with the `notes` fixture, whose limits are small: 4 KiB of state, 1 KiB of arguments per call.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import FIXTURES, REFERENCE_ENVS
from mcp_helpers import ERAS, mcp_client
from pydantic import ValidationError

from envreg.env import Limits, load_environment
from envreg.env.limits import DEFAULT_MAX_ARGUMENT_BYTES, DEFAULT_MAX_STATE_BYTES
from envreg.http.client import request as http_request
from envreg.manifest import build_manifest

NOTES = str(FIXTURES / "notes")


@pytest.mark.parametrize("name", REFERENCE_ENVS)
def test_manifest_publishes_the_limits(name: str) -> None:
    manifest = build_manifest(load_environment(name)).to_json()
    assert manifest["runtime"]["limits"] == {
        "max_state_bytes": DEFAULT_MAX_STATE_BYTES,
        "max_argument_bytes": DEFAULT_MAX_ARGUMENT_BYTES,
    }
    assert DEFAULT_MAX_STATE_BYTES == 8 * 1024 * 1024 and DEFAULT_MAX_ARGUMENT_BYTES == 256 * 1024
    notes = build_manifest(load_environment(NOTES)).to_json()
    assert notes["runtime"]["limits"] == {"max_state_bytes": 4096, "max_argument_bytes": 1024}


def test_oversized_arguments_are_an_error_result_naming_the_limit() -> None:
    instance = load_environment("calendar").instance()
    before = instance.state.sha256()
    huge = "x" * (300 * 1024)
    arguments = {
        "calendar_id": "cal_0001",
        "title": "Planning",
        "start": "2026-01-20T10:00:00",
        "end": "2026-01-20T11:00:00",
        "description": huge,
    }
    result = instance.call_tool("create_event", arguments)
    assert result.is_error
    assert "max_argument_bytes" in result.error and "262,144 bytes" in result.error
    assert f"{len(json.dumps(arguments, separators=(',', ':'))):,} bytes" in result.error
    assert huge[:100] not in result.error, "the argument must not be echoed back"
    assert instance.state.sha256() == before


@pytest.mark.parametrize(
    ("name", "tool", "arguments", "field"),
    [
        (
            "calendar",
            "create_event",
            {
                "calendar_id": "cal_0001",
                "title": "Planning",
                "start": "2026-01-20T10:00:00",
                "end": "2026-01-20T11:00:00",
                "description": "d" * 6000,
            },
            "description",
        ),
        ("calendar", "get_event", {"event_id": "evt_" + "9" * 100}, "event_id"),
        ("bank", "find_customer", {"query": "q" * 500}, "query"),
        ("airline", "find_user", {"email": "a" * 300 + "@example.com"}, "email"),
    ],
)
def test_reference_strings_are_bounded(name: str, tool: str, arguments: dict, field: str) -> None:
    instance = load_environment(name).instance()
    before = instance.state.sha256()
    result = instance.call_tool(tool, arguments)
    assert result.is_error and field in result.error and "at most" in result.error, result.error
    assert len(result.error) < 600, "a long bad value is not echoed in full"
    assert instance.state.sha256() == before


def _bounded_pattern(pattern: str) -> bool:
    """A regex that cannot match arbitrarily long text (no +, * or open-ended {n,})."""
    outside_classes = re.sub(r"\[[^\]]*\]", "", pattern)
    return not any(token in outside_classes for token in ("+", "*", ",}"))


@pytest.mark.parametrize("name", ["calendar", "airline", "bank"])
def test_every_string_of_the_reference_schemas_is_bounded(name: str) -> None:
    manifest = build_manifest(load_environment(name)).to_json()
    unbounded: list[str] = []

    def walk(node: object, where: str) -> None:
        if isinstance(node, dict):
            if node.get("type") == "string" and not (
                "maxLength" in node
                or {"enum", "const"} & set(node)
                or node.get("format") == "date"
                or _bounded_pattern(node.get("pattern", "*"))
            ):
                unbounded.append(where)
            for key, value in node.items():
                walk(value, f"{where}/{key}")
        elif isinstance(node, list):
            for i, value in enumerate(node):
                walk(value, f"{where}/{i}")

    walk(manifest["state_schema"], "state")
    for tool in manifest["tools"]:
        walk(tool["inputSchema"], f"{tool['name']}/input")
    assert not unbounded, f"strings without a size bound: {unbounded}"


def test_a_call_that_would_grow_the_state_past_its_limit_changes_nothing() -> None:
    env = load_environment(NOTES)
    instance = env.instance()
    while not (result := instance.call_tool("add_note", {"text": "n" * 900})).is_error:
        assert len(instance.state.canonical().encode()) <= 4096
    assert "max_state_bytes" in result.error and "4,096 bytes" in result.error, result.error
    assert "nothing was changed" in result.error
    before = instance.state.sha256()
    assert instance.call_tool("add_note", {"text": "n" * 900}).is_error
    assert instance.state.sha256() == before
    assert not instance.call_tool("add_note", {"text": "short"}).is_error, "smaller writes still fit"


def test_loading_an_oversized_state_keeps_the_old_one() -> None:
    env = load_environment(NOTES)
    instance = env.instance({"notes": ["kept"]})
    with pytest.raises(ValidationError, match="max_state_bytes") as info:
        instance.load_state({"notes": ["n" * 1000] * 5})
    assert info.value.errors()[0]["type"] == "state_too_large"
    assert instance.state.notes == ["kept"]
    with pytest.raises(ValidationError, match="max_state_bytes"):
        env.instance({"notes": ["n" * 1000] * 5})


def test_limits_are_validated() -> None:
    with pytest.raises(ValidationError):
        Limits(max_state_bytes=0)
    with pytest.raises(ValidationError):
        Limits(max_argument_bytes=10, surprise=1)  # type: ignore[call-arg]


@pytest.mark.anyio
@pytest.mark.parametrize("era", ERAS)
async def test_limits_over_mcp_and_the_control_plane(env_server, era) -> None:
    server = env_server(NOTES)
    instance = server.new_instance({"notes": ["kept"]})
    async with mcp_client(server.mcp_url(instance), era) as client:
        result = await client.call_tool("add_note", {"text": "a" * 2000})
        assert result.is_error and "max_argument_bytes" in result.content[0].text
        outcomes = [await client.call_tool("add_note", {"text": "b" * 900}) for _ in range(5)]
        assert [r.is_error for r in outcomes] == [False] * 4 + [True]
        assert "max_state_bytes" in outcomes[-1].content[0].text, outcomes[-1].content[0].text
    state = server.state(instance)
    assert len(state["state"]["notes"]) == 5 and state["state"]["notes"][0] == "kept"

    oversized = {"notes": ["c" * 1000] * 5}
    r = http_request(
        "PUT", f"{server.control_url}/instances/{instance}/state", json=oversized, headers=server.auth
    )
    assert r.status_code == 422 and "max_state_bytes" in r.json()["error"], r.text
    r = http_request(
        "POST", f"{server.control_url}/instances", json={"state": oversized}, headers=server.auth
    )
    assert r.status_code == 422 and "max_state_bytes" in r.json()["error"], r.text
    # a body past the control plane's own limit (twice the state limit + 1 MiB) is a 413 naming it
    body = json.dumps({"notes": ["d" * (2 << 20)]})
    r = http_request(
        "PUT", f"{server.control_url}/instances/{instance}/state", content=body, headers=server.auth
    )
    assert r.status_code == 413 and "limit of 1,056,768 bytes" in r.json()["error"], r.text
    assert server.state(instance) == state


def test_serve_env_sizes_its_bodies_from_the_limits(tmp_path: Path) -> None:
    from envreg.server.app import body_limits

    assert body_limits(load_environment("calendar"), None) == (4 << 20, (16 << 20) + (1 << 20))
    assert body_limits(load_environment(NOTES), None) == (4 << 20, 2 * 4096 + (1 << 20))
    assert body_limits(load_environment(NOTES), 2048) == (2048, 2048)
