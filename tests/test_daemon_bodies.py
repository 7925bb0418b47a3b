"""The daemon's REST API refuses bodies Python's JSON parser reads but JSON forbids (NaN, Infinity, a lone
surrogate) with 400 on every route taking a body, and caps the input an error repeats."""

from __future__ import annotations

import httpx2
import pytest

from envreg.daemon.app import DaemonSettings, create_app
from envreg.runtime import Runtime

pytestmark = pytest.mark.anyio
BAD = [
    b'{"a": NaN}',
    b'{"state": {"value": Infinity}}',
    b'{"env": "\\ud800"}',
    b'{"arguments": {"x": "\\udc00"}}',
]


def body_routes(api) -> list[tuple[str, str]]:
    return [
        (method, route.path)
        for route in api.routes
        for method in getattr(route, "methods", ())
        if method in ("POST", "PUT", "PATCH")
    ]


async def test_nan_and_lone_surrogates_get_400_on_every_route() -> None:
    async with Runtime() as rt, httpx2.AsyncClient() as upstream:
        app = create_app(
            rt, DaemonSettings(token="t", tiers=("local",), allowed_hosts=("127.0.0.1:*",)), upstream
        )
        transport = httpx2.ASGITransport(app=app)
        headers = {"authorization": "Bearer t", "content-type": "application/json"}
        async with httpx2.AsyncClient(transport=transport, base_url="http://127.0.0.1:7070") as client:
            routes = body_routes(app.api)
            assert len(routes) >= 5
            for method, path in routes:
                url = path.replace("{sandbox_id}", "sb_0000000000000000").replace("{tool}", "t")
                for body in BAD:
                    response = await client.request(method, url, content=body, headers=headers)
                    assert response.status_code == 400, (method, path, body, response.text)
                    error = response.json()["error"]
                    assert "NaN or Infinity" in error or "lone surrogate" in error, error


async def test_an_error_repeats_at_most_200_characters_of_a_bad_input() -> None:
    async with Runtime() as rt, httpx2.AsyncClient() as upstream:
        app = create_app(
            rt, DaemonSettings(token="t", tiers=("local",), allowed_hosts=("127.0.0.1:*",)), upstream
        )
        transport = httpx2.ASGITransport(app=app)
        headers = {"authorization": "Bearer t"}
        huge = {"env": ["x" * 3_000_000], "isolation": "local"}
        async with httpx2.AsyncClient(transport=transport, base_url="http://127.0.0.1:7070") as client:
            response = await client.post("/v1/sandboxes", json=huge, headers=headers)
        assert response.status_code == 400
        assert len(response.content) < 10_000, len(response.content)
        assert "characters in all" in response.text
