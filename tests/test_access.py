"""`AccessGuard`: the Host / Origin rule (DNS rebinding) and CORS, on raw ASGI requests."""

from __future__ import annotations

import json

import pytest

from envreg.http.access import AccessGuard, shorten

pytestmark = pytest.mark.anyio
PORT = 7070


async def inner(scope, receive, send) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"ok"})


async def call(guard: AccessGuard, headers: dict[str, str], method: str = "POST", server=("127.0.0.1", PORT)):
    scope = {
        "type": "http",
        "method": method,
        "path": "/sandboxes/sb_1/mcp",
        "headers": [(k.encode(), v.encode()) for k, v in headers.items()],
        "server": server,
        "query_string": b"",
    }
    sent: list[dict] = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    await guard(scope, receive, send)
    start = sent[0]
    body = b"".join(m.get("body", b"") for m in sent[1:])
    return start["status"], {k.decode(): v.decode() for k, v in start["headers"]}, body


@pytest.mark.parametrize(
    ("host", "status"),
    [
        (f"127.0.0.1:{PORT}", 200),
        (f"localhost:{PORT}", 200),
        (f"LOCALHOST:{PORT}", 200),
        (f"[::1]:{PORT}", 200),
        ("127.0.0.1:1", 421),  # loopback, but another port: not this server
        ("localhost", 421),  # port 80
        ("evil.example.com", 421),
        (f"evil.example.com:{PORT}", 421),
        (f"localhost.evil.example:{PORT}", 421),
        (f"127.0.0.1.nip.io:{PORT}", 421),
        ("", 421),
        (f"[::1:{PORT}", 421),
        ("proxy.test:8443", 200),  # allowed exactly
        ("proxy.test:8444", 421),
        ("any.test:1234", 200),  # allowed on any port
        ("any.test", 421),  # a wildcard needs a port
    ],
)
async def test_host_rule(host: str, status: int) -> None:
    guard = AccessGuard(inner, allowed_hosts=["proxy.test:8443", "any.test:*"])
    got, _, body = await call(guard, {"host": host} if host else {})
    assert got == status, body
    if status == 421:
        assert "DNS-rebinding" in json.loads(body)["error"]


async def test_no_host_header_is_refused() -> None:
    assert (await call(AccessGuard(inner), {}))[0] == 421


async def test_the_address_a_request_arrived_at_is_its_host() -> None:
    guard = AccessGuard(inner)
    assert (await call(guard, {"host": f"10.1.2.3:{PORT}"}, server=("10.1.2.3", PORT)))[0] == 200
    assert (await call(guard, {"host": f"10.1.2.4:{PORT}"}, server=("10.1.2.3", PORT)))[0] == 421
    assert (await call(guard, {"host": f"[fd00::1]:{PORT}"}, server=("fd00::1", PORT)))[0] == 200


@pytest.mark.parametrize(
    ("origin", "status"),
    [
        (f"http://127.0.0.1:{PORT}", 200),
        (f"http://localhost:{PORT}", 200),
        ("http://localhost:6274", 403),  # another local page: only when configured
        ("http://evil.example.com", 403),
        (f"http://evil.example.com:{PORT}", 403),
        ("null", 403),
        ("file://", 403),
        (f"ftp://localhost:{PORT}", 403),
        ("https://app.example", 200),  # a configured CORS origin
        ("https://app.example/", 200),
        ("http://proxy.test:8443", 200),  # an allowed host is an allowed origin
        ("https://secure.test", 200),  # allowed as secure.test:443
    ],
)
async def test_origin_rule(origin: str, status: int) -> None:
    guard = AccessGuard(
        inner, allowed_hosts=["proxy.test:8443", "secure.test:443"], cors_origins=["https://app.example"]
    )
    got, _, body = await call(guard, {"host": f"127.0.0.1:{PORT}", "origin": origin})
    assert got == status, body


async def test_cors_preflight_and_simple_responses() -> None:
    guard = AccessGuard(inner, cors_origins=["https://app.example"])
    preflight = {
        "host": f"127.0.0.1:{PORT}",
        "origin": "https://app.example",
        "access-control-request-method": "POST",
        "access-control-request-headers": "authorization, mcp-protocol-version, mcp-session-id",
    }
    status, headers, _ = await call(guard, preflight, method="OPTIONS")
    assert status == 200
    assert headers["access-control-allow-origin"] == "https://app.example"
    assert headers["access-control-allow-headers"] == "authorization, mcp-protocol-version, mcp-session-id"
    assert "DELETE" in headers["access-control-allow-methods"]
    status, headers, _ = await call(guard, {"host": f"127.0.0.1:{PORT}", "origin": "https://app.example"})
    assert status == 200 and headers["access-control-allow-origin"] == "https://app.example"
    assert "Mcp-Session-Id" in headers["access-control-expose-headers"]
    # a request without Origin (every non-browser client) passes untouched
    status, headers, _ = await call(guard, {"host": f"127.0.0.1:{PORT}"})
    assert status == 200 and "access-control-allow-origin" not in headers


async def test_any_origin_when_asked() -> None:
    guard = AccessGuard(inner, cors_origins=["*"])
    status, headers, _ = await call(guard, {"host": f"127.0.0.1:{PORT}", "origin": "https://x.example"})
    assert status == 200 and headers["access-control-allow-origin"] == "*"


async def test_no_cors_by_default() -> None:
    guard = AccessGuard(inner)
    status, headers, _ = await call(
        guard,
        {
            "host": f"127.0.0.1:{PORT}",
            "origin": "https://app.example",
            "access-control-request-method": "POST",
        },
        method="OPTIONS",
    )
    assert status == 403 and "access-control-allow-origin" not in headers


def test_shorten() -> None:
    assert shorten("sb_1") == "sb_1"
    long = "x" * 5000
    assert shorten(long) == "x" * 64 + "… (5000 characters)"
