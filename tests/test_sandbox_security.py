"""Attacks on the sandbox plane (issue 8): what a host user, an agent inside a sandbox, or a REST client
without the right token or with oversized / crafted input can and cannot do."""

from __future__ import annotations

import http.server
import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import docker
import httpx2
import pytest
from daemon_helpers import DaemonProcess
from mcp_helpers import ERAS, mcp_client

from envreg.config import image_prefix
from envreg.http.client import request as http_request
from envreg.protocol import AGENT_PORT
from envreg.runtime import Runtime

pytestmark = [pytest.mark.docker]

LIST_CALENDARS = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "tools/call",
    "params": {
        "name": "list_calendars",
        "arguments": {},
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
        },
    },
}
MCP_HEADERS = {
    "content-type": "application/json",
    "accept": "application/json, text/event-stream",
    "mcp-protocol-version": "2026-07-28",
    "mcp-method": "tools/call",
    "mcp-name": "list_calendars",
}


@pytest.fixture(autouse=True)
def _images(reference_images) -> None:
    pass


@pytest.mark.anyio
@pytest.mark.parametrize("isolation", ["container", "instance"])
async def test_the_agent_plane_answers_only_through_the_gateway(isolation: str) -> None:
    async with Runtime() as rt:
        sb = await rt.sandbox("calendar", isolation=isolation)
        direct = f"http://{sb.upstream.host}:{AGENT_PORT}{sb.upstream.path}"
        async with httpx2.AsyncClient() as http:
            for headers in ({}, {"authorization": f"Bearer {sb.token}"}, {"authorization": "Bearer x"}):
                r = await http.post(direct, json=LIST_CALENDARS, headers={**MCP_HEADERS, **headers})
                assert r.status_code == 401, (
                    "a host user reached the sandbox without going through the gateway"
                )
                assert "MCP URL" in r.json()["error"]["message"]
        for era in ERAS:  # the gateway path still works in both eras
            async with mcp_client(sb.mcp_url, era, token=sb.token) as client:
                assert not (await client.call_tool("list_calendars", {})).is_error


# every target and the DNS lookup at once: a dropped SYN or query waits out its whole timeout
PROBE = """
import json, socket, sys, threading
targets = json.loads(sys.argv[1])
out = {}
def connect(name, host, port):
    s = socket.socket(); s.settimeout(3)
    try:
        s.connect((host, port)); out[name] = "open"
    except OSError as exc:
        out[name] = type(exc).__name__
    finally:
        s.close()
def resolve():
    try:
        socket.getaddrinfo("deb.debian.org", 443); out["dns"] = "resolved"
    except OSError as exc:
        out["dns"] = type(exc).__name__
threads = [threading.Thread(target=connect, args=(n, h, p)) for n, (h, p) in targets.items()]
threads.append(threading.Thread(target=resolve))
for t in threads: t.start()
for t in threads: t.join()
print(json.dumps(out))
"""


@pytest.fixture
def host_service() -> Iterator[int]:
    """A service on this host bound to every address, as careless host software is."""
    server = http.server.ThreadingHTTPServer(("0.0.0.0", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()


@pytest.mark.anyio
async def test_nothing_is_reachable_from_inside_a_sandbox(host_service: int) -> None:
    async with Runtime() as rt:
        sb = await rt.sandbox("calendar", isolation="container")
        other = await rt.sandbox("calendar", isolation="instance")
        client = docker.from_env()
        network = client.networks.get(rt.backend.network_name).attrs
        gateway_ip = network["IPAM"]["Config"][0]["Gateway"]
        # the host really serves on that address: only the sandbox is kept out
        with socket.create_connection((gateway_ip, host_service), timeout=3):
            pass
        targets = {
            "host service on the network's gateway address": (gateway_ip, host_service),
            "the host's gateway port": (gateway_ip, int(rt.gateway_url.rsplit(":", 1)[1])),
            "another sandbox's agent plane": (other.upstream.host, AGENT_PORT),
            "an outside address": ("1.1.1.1", 443),
        }
        probe = client.containers.get(sb.server.id).exec_run(
            ["python3", "-c", PROBE, json.dumps(targets)],
            environment={"RES_OPTIONS": "timeout:2 attempts:1"},  # glibc's resolver: one 2 s try, not 2 x 5 s
        )
        assert probe.exit_code == 0, probe.output
        seen = json.loads(probe.output)
        assert all(result != "open" for result in seen.values()), seen
        assert seen["dns"] != "resolved", seen
        assert not (await sb.call_tool("list_calendars")).is_error  # the runtime still reaches it


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[DaemonProcess]:
    proc = DaemonProcess(tmp_path, extra=["--tiers", "instance,container"]).start()
    yield proc
    proc.stop()


def test_rest_api_refuses_oversized_and_crafted_input(daemon: DaemonProcess) -> None:
    sb = daemon.ok("POST", "/v1/sandboxes", {"env": "calendar", "isolation": "instance"}, status=201)
    sid = sb["id"]
    huge = {"name": "list_calendars", "arguments": {"x": "a" * (50 << 20)}}
    r = daemon.request("POST", f"/v1/sandboxes/{sid}/call", huge)
    assert r.status_code == 413 and "limit" in r.json()["error"]
    state = daemon.ok("GET", f"/v1/sandboxes/{sid}/state")["state"]
    owner = state["owner"]["name"]
    state["owner"]["name"] = "x" * (6 << 20)  # under every body limit, over the field's max_length
    r = daemon.request("PUT", f"/v1/sandboxes/{sid}/state", {"state": state})
    assert r.status_code == 422 and "owner.name" in r.json()["error"], r.text[:300]
    r = daemon.request("PUT", f"/v1/sandboxes/{sid}/state", {"state": {"pad": "x" * (20 << 20)}})
    assert r.status_code == 413 and "limit" in r.json()["error"], r.text[:300]  # the daemon's 16 MiB
    assert daemon.ok("GET", f"/v1/sandboxes/{sid}/state")["state"]["owner"]["name"] == owner  # kept
    for env in ("calendar/../../x", "calendar/%2e%2e/x", "calendar?x=1", "../../containers/json"):
        r = daemon.request("POST", "/v1/sandboxes", {"env": env, "isolation": "container"})
        assert r.status_code == 400, r.text  # refused before it reaches an engine API path
    r = daemon.request(
        "POST", "/v1/sandboxes", {"env": f"{image_prefix()}base:latest", "isolation": "container"}
    )
    assert r.status_code == 404 and "not an envreg environment image" in r.json()["error"], r.text
    long_id = "sb_" + "x" * 5000
    r = daemon.request("GET", f"/v1/sandboxes/{long_id}")
    assert r.status_code == 404 and len(r.text) < 500
    assert daemon.request("GET", "/v1/sandboxes/nope?tokens=true&debug=1").status_code == 400


def test_a_corrupted_snapshot_is_a_client_error(daemon: DaemonProcess) -> None:
    sb = daemon.ok("POST", "/v1/sandboxes", {"env": "calendar", "isolation": "instance"}, status=201)
    snap = daemon.ok("POST", f"/v1/sandboxes/{sb['id']}/snapshot", status=201)
    path = daemon.home / "snapshots" / f"{snap['id'].removeprefix('sha256:')}.json"
    data = json.loads(path.read_text())
    data["state"]["owner"]["name"] = "Mallory"
    path.write_text(json.dumps(data))
    r = daemon.request("POST", f"/v1/sandboxes/{sb['id']}/restore", {"snapshot": snap["id"]})
    assert r.status_code == 422 and "altered" in r.json()["error"]


@pytest.mark.anyio
async def test_bearer_scheme_is_case_insensitive_everywhere(daemon: DaemonProcess) -> None:
    for scheme in ("bearer", "BEARER"):
        r = http_request(
            "GET", f"{daemon.url}/v1/healthz", headers={"authorization": f"{scheme} {daemon.token}"}
        )
        assert r.status_code == 200
    sb = daemon.ok("POST", "/v1/sandboxes", {"env": "calendar", "isolation": "instance"}, status=201)
    async with httpx2.AsyncClient() as http:
        r = await http.post(
            sb["mcp_url"],
            json=LIST_CALENDARS,
            headers={**MCP_HEADERS, "authorization": f"bearer {sb['token']}"},
        )
        assert r.status_code == 200 and r.json()["result"]["isError"] is False
