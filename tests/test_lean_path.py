"""Differential tests: the lean path answers exactly as the `mcp` SDK does, for every request shape."""

from __future__ import annotations

import copy
import json

import pytest
from conftest import COUNTER
from servers import ANSWER_S, modern_request

from envreg.http.client import request


def variants() -> list:
    call, call_headers = modern_request("tools/call", {"name": "increment", "arguments": {"by": 2}}, rid=7)
    listing, list_headers = modern_request("tools/list", rid="list-1")
    discover, discover_headers = modern_request("server/discover", rid=3)
    out = [
        ("call", call, call_headers),
        ("call-error-result", _with(call, ["params", "arguments", "by"], -1), call_headers),
        ("call-invalid-argument", _with(call, ["params", "arguments", "by"], "x"), call_headers),
        ("call-extra-argument", _with(call, ["params", "arguments", "nope"], 1), call_headers),
        ("call-no-arguments", _drop(call, ["params", "arguments"]), call_headers),
        (
            "call-read-only",
            _with(_drop(call, ["params", "arguments"]), ["params", "name"], "get"),
            {**call_headers, "mcp-name": "get"},
        ),
        ("call-unknown-tool", _with(call, ["params", "name"], "nope"), {**call_headers, "mcp-name": "nope"}),
        ("call-name-header-mismatch", call, {**call_headers, "mcp-name": "get"}),
        ("call-name-header-missing", call, _without(call_headers, "mcp-name")),
        ("call-method-header-mismatch", call, {**call_headers, "mcp-method": "tools/list"}),
        ("call-version-header-mismatch", call, {**call_headers, "mcp-protocol-version": "2025-11-25"}),
        (
            "call-unsupported-version",
            _with(call, ["params", "_meta", "io.modelcontextprotocol/protocolVersion"], "2099-01-01"),
            {**call_headers, "mcp-protocol-version": "2099-01-01"},
        ),
        ("call-no-meta", _drop(call, ["params", "_meta"]), call_headers),
        ("call-arguments-not-object", _with(call, ["params", "arguments"], [1]), call_headers),
        ("call-string-id", _with(call, ["id"], "abc"), call_headers),
        ("call-unicode-id", _with(call, ["id"], "zé-☃"), call_headers),
        ("call-json-accept-only", call, {**call_headers, "accept": "application/json"}),
        ("call-wildcard-accept", call, {**call_headers, "accept": "*/*"}),
        ("call-sse-accept-only", call, {**call_headers, "accept": "text/event-stream"}),
        ("call-bad-host", call, {**call_headers, "host": "evil.example:80"}),
        ("call-bad-origin", call, {**call_headers, "origin": "http://evil.example"}),
        ("call-good-origin", call, {**call_headers, "origin": "http://localhost:1234"}),
        ("call-param-header", call, {**call_headers, "mcp-param-by": "2"}),
        ("list", listing, list_headers),
        ("list-cursor", _with(listing, ["params", "cursor"], "abc"), list_headers),
        ("discover", discover, discover_headers),
        ("ping", modern_request("ping")[0], modern_request("ping")[1]),
        ("notification", _drop(call, ["id"]), call_headers),
        ("batch", [call], call_headers),
        ("wrong-jsonrpc", _with(call, ["jsonrpc"], "1.0"), call_headers),
        ("bool-id", _with(call, ["id"], True), call_headers),
    ]
    return [pytest.param(body, headers, id=name) for name, body, headers in out]


def _with(body: dict, path: list[str], value: object) -> dict:
    body = copy.deepcopy(body)
    node = body
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return body


def _drop(body: dict, path: list[str]) -> dict:
    body = copy.deepcopy(body)
    node = body
    for key in path[:-1]:
        node = node[key]
    del node[path[-1]]
    return body


def _without(headers: dict, key: str) -> dict:
    return {k: v for k, v in headers.items() if k != key}


def exchange(server, body, headers) -> tuple[int, str, object, str]:
    """POST to a fresh instance; return status, content type, decoded body and the state hash after."""
    instance = server.new_instance()
    headers = dict(headers)
    headers.setdefault("host", f"127.0.0.1:{server.port}")
    r = request(
        "POST",
        server.mcp_url(instance),
        content=json.dumps(body),
        headers=headers,
        timeout=ANSWER_S,
    )
    try:
        decoded = r.json()
    except ValueError:
        decoded = r.text
    return r.status_code, r.headers.get("content-type", ""), decoded, server.state(instance)["sha256"]


@pytest.mark.parametrize(("body", "headers"), variants())
def test_lean_path_answers_as_the_sdk_does(env_server, body, headers) -> None:
    lean = exchange(env_server(COUNTER, True), body, headers)
    sdk = exchange(env_server(COUNTER, False), body, headers)
    assert lean == sdk


def test_a_valid_call_is_answered_and_changes_state(env_server) -> None:
    body, headers = modern_request("tools/call", {"name": "increment", "arguments": {"by": 2}})
    status, content_type, decoded, _ = exchange(env_server(COUNTER, True), body, headers)
    assert status == 200 and content_type == "application/json"
    assert decoded["result"]["structuredContent"] == {"result": 2}
