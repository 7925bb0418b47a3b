"""Sessions that clients never close, on the instance tier: a sandbox that floods them in a shared
container evicts its own, its co-tenant keeps working, the container lives; a sandbox's sessions end
with it."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import httpx2
import pytest
from conftest import scaled
from js_clients import env as js_env
from js_clients import install
from mcp_helpers import mcp_client
from test_sessions import ACCEPT, INITIALIZE, LEGACY, session_headers

from envreg.runtime import Runtime
from envreg.runtime.backends.docker import Limits
from envreg.server.sessions import SessionLimits

pytestmark = [pytest.mark.docker, pytest.mark.anyio]
MIB = 1024 * 1024
LIST = {"jsonrpc": "2.0", "id": 9, "method": "tools/list", "params": {}}


@pytest.fixture(autouse=True)
def _images(reference_images) -> None:
    pass


async def open_sessions(http: httpx2.AsyncClient, sb, n: int, opened: list[str]) -> None:
    """`n` sessions through the gateway, opened as the TypeScript SDK opens them and never DELETEd."""
    auth = {"authorization": f"Bearer {sb.token}"}
    for _ in range(n):
        r = await http.post(sb.mcp_url, json=INITIALIZE, headers={**ACCEPT, **auth})
        assert r.status_code == 200, r.text[:300]
        opened.append(r.headers["mcp-session-id"])
        note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        r = await http.post(sb.mcp_url, json=note, headers={**session_headers(opened[-1]), **auth})
        assert r.status_code == 202, r.text


async def keep_calling(sb, stop: anyio.Event, calls: list[int], errors: list[str]) -> None:
    """A co-tenant's agent: a real `mcp` client in the session era calling a tool until told to stop."""
    async with mcp_client(sb.mcp_url, LEGACY, sb.token) as client:
        while not stop.is_set():
            try:
                result = await client.call_tool("list_calendars", {})
                if result.is_error:
                    errors.append(result.content[0].text)
            except Exception as exc:
                errors.append(f"{type(exc).__name__}: {exc}")
            calls.append(1)


async def flood_while_a_co_tenant_works(rt: Runtime, flood) -> tuple:
    flooder = await rt.sandbox("calendar", isolation="instance")
    tenant = await rt.sandbox("calendar", isolation="instance")
    assert flooder.server.id == tenant.server.id, "both sandboxes must share one container"
    calls: list[int] = []
    errors: list[str] = []
    stop = anyio.Event()
    async with anyio.create_task_group() as tg:
        tg.start_soon(keep_calling, tenant, stop, calls, errors)
        while not calls and not errors:
            await anyio.sleep(0.01)
        try:
            await flood(flooder)
        finally:
            stop.set()
    return flooder, tenant, calls, errors


async def test_a_sandbox_flooding_sessions_evicts_its_own_and_its_co_tenant_keeps_working() -> None:
    limits = SessionLimits.for_memory(128 * MIB)
    opened: list[str] = []
    async with Runtime(limits=Limits(memory="128m")) as rt, httpx2.AsyncClient(timeout=60) as http:

        async def flood(sb) -> None:
            await open_sessions(http, sb, 3 * limits.max_per_instance, opened)

        flooder, tenant, calls, errors = await flood_while_a_co_tenant_works(rt, flood)
        assert errors == [] and len(calls) >= 5, (len(calls), errors[:5])
        auth = {"authorization": f"Bearer {flooder.token}"}
        r = await http.post(flooder.mcp_url, json=LIST, headers={**session_headers(opened[0]), **auth})
        assert r.status_code == 404, r.text[:300]
        assert f"session {opened[0]} was evicted" in r.json()["error"]["message"], r.text
        r = await http.post(flooder.mcp_url, json=LIST, headers={**session_headers(opened[-1]), **auth})
        assert r.status_code == 200, r.text[:300]
        sessions = (await tenant.server.client.healthz())["sessions"]
        # sized to the container's memory: a quarter of 128 MiB at 48 KiB a session, an eighth per sandbox
        assert sessions["memory_limit"] == 128 * MIB
        assert (sessions["max"], sessions["max_per_instance"]) == (682, 85)
        assert sessions["open"] <= limits.max_per_instance + 2  # the flooder's, and the co-tenant's
        assert sessions["evicted"] >= 2 * limits.max_per_instance
        # the container lives: both sandboxes still answer
        assert flooder.ended is None and tenant.ended is None
        assert await rt.backend.status(tenant.server) == "running"
        assert (await tenant.call_tool("list_calendars", {})).is_error is False
        assert (await flooder.call_tool("list_calendars", {})).is_error is False


@pytest.mark.slow
async def test_thousands_of_typescript_sessions_leave_a_256_mib_container_and_its_co_tenant_alone(
    tmp_path: Path,
) -> None:
    """More sessions than the ~5,500 that OOM-killed a 256 MiB container (at full size; 400 by default),
    opened by the TypeScript SDK, which never DELETEs them, while a co-tenant sandbox in the same
    container keeps calling tools."""
    js = install()
    total = scaled(6000, 400)
    async with Runtime() as rt:

        async def flood(sb) -> None:
            job = {"url": sb.mcp_url, "token": sb.token, "sessions": total, "concurrency": 16}
            (tmp_path / "flood.json").write_text(json.dumps(job))
            with anyio.fail_after(1200):
                proc = await anyio.run_process(
                    ["node", "flood.mjs", str(tmp_path / "flood.json")], cwd=js, env=js_env(js), check=False
                )
            assert proc.returncode == 0, proc.stderr.decode()[-3000:]
            result = json.loads(proc.stdout)
            assert result["opened"] == total and result["failed"] == 0, result["errors"][:5]

        flooder, tenant, calls, errors = await flood_while_a_co_tenant_works(rt, flood)
        assert errors == [] and calls, errors[:5]
        sessions = (await tenant.server.client.healthz())["sessions"]
        assert sessions["memory_limit"] == 256 * MIB and sessions["max_per_instance"] == 170
        assert sessions["open"] <= 172 and sessions["evicted"] >= total - 170 - 2
        assert flooder.ended is None and tenant.ended is None
        assert await rt.backend.status(tenant.server) == "running"
        assert (await tenant.call_tool("list_calendars", {})).is_error is False


async def test_a_sandboxs_sessions_end_when_it_ends() -> None:
    async with Runtime() as rt, httpx2.AsyncClient(timeout=60) as http:
        ending = await rt.sandbox("calendar", isolation="instance")
        staying = await rt.sandbox("calendar", isolation="instance")
        assert ending.server.id == staying.server.id
        kept: list[str] = []
        gone: list[str] = []
        await open_sessions(http, staying, 1, kept)
        await open_sessions(http, ending, 3, gone)
        await ending.close("deleted")
        # a session is not tied to a path: one left over could be used on a co-tenant's, were it kept
        auth = {"authorization": f"Bearer {staying.token}"}
        r = await http.post(staying.mcp_url, json=LIST, headers={**session_headers(gone[0]), **auth})
        assert r.status_code == 404, r.text[:300]
        assert r.json()["error"]["message"] == f"session {gone[0]} ended with its instance, which was deleted"
        r = await http.post(staying.mcp_url, json=LIST, headers={**session_headers(kept[0]), **auth})
        assert r.status_code == 200, r.text[:300]
        assert (await staying.server.client.healthz())["sessions"]["open"] == 1
