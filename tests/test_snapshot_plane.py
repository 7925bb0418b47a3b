"""The state plane: servers keep snapshots by hash, restores and forks name them, a state crosses once."""

from __future__ import annotations

import gzip
import hashlib
import itertools
import json

import pytest
from conftest import COUNTER
from servers import EnvServerProcess, stop_all

from envreg.canonical import canonical_json
from envreg.env import load_environment
from envreg.errors import InvalidState, SnapshotMismatch
from envreg.http.client import request as http_request
from envreg.runtime import Runtime
from envreg.runtime.backends.local import LocalBackend
from envreg.runtime.snapshots import SnapshotStore

pytestmark = pytest.mark.anyio


def call(server: EnvServerProcess, instance_id: str, tool: str, arguments: dict) -> dict:
    from servers import modern_request

    body, headers = modern_request("tools/call", {"name": tool, "arguments": arguments})
    r = http_request("POST", server.mcp_url(instance_id), json=body, headers=headers)
    assert r.status_code == 200, r.text
    return r.json()["result"]


@pytest.fixture(scope="module")
def two_banks():
    servers = [EnvServerProcess("bank").start(), EnvServerProcess("bank").start()]
    yield servers
    stop_all(servers)


LIMITS = itertools.count(4321)
"""A new state, so a new snapshot, each time the test runs: the module's servers keep what a run moved
(`scripts/flaky-report` runs it again on them)."""


def test_a_snapshot_is_kept_by_hash_and_moves_to_another_server_once(two_banks) -> None:
    a, b = two_banks
    source = a.new_instance()
    call(a, source, "set_daily_limit", {"account_id": "acc_0001", "limit_cents": next(LIMITS)})
    r = http_request("POST", f"{a.control_url}/instances/{source}/snapshot", headers=a.auth)
    assert r.status_code == 200
    sha = r.json()["sha256"]
    assert sha == a.state(source)["sha256"]
    # downloaded compressed; the canonical JSON hashes to its address
    raw = http_request(
        "GET", f"{a.control_url}/snapshots/{sha}", headers={**a.auth, "accept-encoding": "gzip"}
    )
    assert raw.status_code == 200 and raw.headers["content-encoding"] == "gzip"
    canonical = raw.content
    assert hashlib.sha256(canonical).hexdigest() == sha
    assert canonical.decode() == canonical_json(a.state(source)["state"])
    # b does not have it: a restore says so, and changes nothing
    target = b.new_instance()
    before = b.state(target)["sha256"]
    r = http_request(
        "POST", f"{b.control_url}/instances/{target}/restore", json={"snapshot": sha}, headers=b.auth
    )
    assert r.status_code == 404 and r.json()["missing_snapshot"] == sha
    assert b.state(target)["sha256"] == before
    # uploaded once (gzip), then restored and forked by hash
    put = http_request(
        "PUT",
        f"{b.control_url}/snapshots/{sha}",
        content=gzip.compress(canonical),
        headers={**b.auth, "content-encoding": "gzip", "content-type": "application/json"},
    )
    assert put.status_code == 201, put.text
    r = http_request(
        "POST", f"{b.control_url}/instances/{target}/restore", json={"snapshot": sha}, headers=b.auth
    )
    assert r.status_code == 200 and b.state(target)["sha256"] == sha
    fork = http_request("POST", f"{b.control_url}/instances", json={"snapshot": sha}, headers=b.auth)
    assert fork.status_code == 201 and fork.json()["sha256"] == sha
    # the fork and the restored instance diverge on their own; the kept snapshot stays as it was
    call(b, fork.json()["id"], "set_daily_limit", {"account_id": "acc_0001", "limit_cents": 1111})
    assert b.state(target)["sha256"] == sha != b.state(fork.json()["id"])["sha256"]
    again = http_request("POST", f"{b.control_url}/instances", json={"snapshot": sha}, headers=b.auth)
    assert again.json()["sha256"] == sha


@pytest.mark.parametrize(
    ("body", "encoding", "status", "message"),
    [
        (b'{"now":"2026-01-05T09:00:00"}', None, 422, "does not hash to"),
        (b"not gzip at all", "gzip", 422, "not valid gzip"),
        (b"x", "br", 422, "unsupported content-encoding"),
    ],
)
def test_an_upload_that_is_not_what_its_address_names_is_refused(
    two_banks, body, encoding, status, message
) -> None:
    _, b = two_banks
    sha = hashlib.sha256(b"something else").hexdigest()
    headers = {**b.auth, **({"content-encoding": encoding} if encoding else {})}
    r = http_request("PUT", f"{b.control_url}/snapshots/{sha}", content=body, headers=headers)
    assert r.status_code == status and message in r.json()["error"], r.text


def test_an_invalid_state_is_refused_with_its_problems(two_banks) -> None:
    _, b = two_banks
    bad = canonical_json({"customers": "nobody"}).encode()
    sha = hashlib.sha256(bad).hexdigest()
    r = http_request("PUT", f"{b.control_url}/snapshots/{sha}", content=bad, headers=b.auth)
    assert r.status_code == 422 and r.json()["errors"]
    r = http_request("POST", f"{b.control_url}/instances", json={"snapshot": sha}, headers=b.auth)
    assert r.status_code == 404 and r.json()["missing_snapshot"] == sha


def test_a_compressed_bomb_is_refused() -> None:
    server = EnvServerProcess(COUNTER, extra=["--max-body", "65536"]).start()
    try:
        bomb = gzip.compress(b" " * 10_000_000)
        sha = hashlib.sha256(b" " * 10_000_000).hexdigest()
        r = http_request(
            "PUT",
            f"{server.control_url}/snapshots/{sha}",
            content=bomb,
            headers={**server.auth, "content-encoding": "gzip"},
        )
        assert r.status_code == 422 and "limit of 65,536 bytes" in r.json()["error"]
    finally:
        server.stop()


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/instances/default/snapshot"),
        ("POST", "/instances/default/restore"),
        ("GET", "/snapshots/" + "0" * 64),
        ("PUT", "/snapshots/" + "0" * 64),
    ],
)
def test_snapshot_routes_need_the_token_and_exist_only_on_the_control_plane(two_banks, method, path) -> None:
    a, _ = two_banks
    assert http_request(method, f"{a.control_url}{path}", json={}).status_code == 401
    assert http_request(method, f"{a.url}{path}", headers=a.auth, json={}).status_code == 404


def test_bad_restore_requests_name_the_problem(two_banks) -> None:
    a, _ = two_banks
    r = http_request("POST", f"{a.control_url}/instances/default/restore", json={"snap": 1}, headers=a.auth)
    assert r.status_code == 400 and "snapshot" in r.json()["error"]
    r = http_request(
        "POST", f"{a.control_url}/instances/nope/restore", json={"snapshot": "0" * 64}, headers=a.auth
    )
    assert r.status_code == 404 and "missing_snapshot" not in r.json()
    r = http_request("PUT", f"{a.control_url}/snapshots/XYZ", content=b"{}", headers=a.auth)
    assert r.status_code == 400 and "64 lowercase hex" in r.json()["error"]


# ------------------------------------------------------------------------------------------ runtime


async def test_restore_into_another_server_sends_the_state_once_then_names_it() -> None:
    """Two runtimes are two servers: the second gets the state once, then restores and forks by hash."""
    async with Runtime() as one, Runtime() as two:
        sb = await one.sandbox(COUNTER)
        await sb.call_tool("increment", {"by": 5})
        snap = await sb.snapshot()
        assert snap.sha256 == await sb.state_sha256()
        target = await two.sandbox(COUNTER)
        server = target.server
        uploads = []
        original = server.client.upload_snapshot

        async def counting(snapshot):
            uploads.append(snapshot.sha256)
            await original(snapshot)

        server.client.upload_snapshot = counting
        await target.restore(snap)
        forks = await two.fork(snap, 8)
        assert uploads == [snap.sha256]
        for fork in [target, *forks]:
            assert await fork.state_sha256() == snap.sha256
        await forks[0].call_tool("increment", {"by": 1})
        assert await forks[1].state_sha256() == snap.sha256 != await forks[0].state_sha256()


async def test_a_server_that_dropped_a_snapshot_gets_it_again(envreg_home) -> None:
    env = load_environment(COUNTER)
    async with Runtime() as rt:
        sb = await rt.sandbox(env)
        await sb.call_tool("increment", {"by": 2})
        snap = await sb.snapshot()
        store = sb.server.handle
        store.snapshots.budget = 0  # keep nothing beyond the newest
        await sb.call_tool("increment", {"by": 1})
        other = await sb.snapshot()
        assert snap.sha256 not in store.snapshots and other.sha256 in store.snapshots
        await sb.restore(snap)
        assert await sb.state_sha256() == snap.sha256


async def test_snapshots_taken_through_the_api_are_durable_and_verifiable(envreg_home) -> None:
    async with Runtime() as rt:
        sb = await rt.sandbox("bank")
        await sb.call_tool("set_daily_limit", {"account_id": "acc_0001", "limit_cents": 777})
        snap = await sb.snapshot()
    stored = SnapshotStore().get(snap.id)
    assert stored.sha256 == snap.sha256 and stored.state == snap.state
    assert stored.state["accounts"]["acc_0001"]["daily_limit_cents"] == 777
    async with Runtime() as fresh:  # a new process's servers have nothing: the disk copy is sent
        sb = await fresh.sandbox("bank", state=SnapshotStore().get(snap.id[:20]))
        assert await sb.state_sha256() == snap.sha256


async def test_an_uploaded_state_is_validated() -> None:
    async with Runtime() as rt:
        sb = await rt.sandbox("bank")
        snap = SnapshotStore().put("bank", sb.env_digest, {"customers": "nobody"})
        before = await sb.state_sha256()
        with pytest.raises(InvalidState):
            await sb.restore(snap)
        assert await sb.state_sha256() == before


def test_local_servers_share_committed_states() -> None:
    """A fork on the local tier holds the snapshot's very state object: no copy at all."""
    import anyio

    async def main() -> None:
        async with Runtime() as rt:
            sb = await rt.sandbox("calendar")
            snap = await sb.snapshot()
            forks = await rt.fork(snap, 4)
            states = {id(f.server.handle.get(f.instance_id).state) for f in forks}
            assert len(states) == 1
            assert isinstance(rt._local.backend, LocalBackend)

    anyio.run(main)


def test_a_kept_snapshot_restores_without_serializing_its_state(monkeypatch) -> None:
    """A restore by hash is O(1): the size check reads the size the upload measured (a fork of a 1 MB state
    into 8 containers paid a serialization per container before)."""
    import pydantic_core

    from envreg.server.snapshots import SnapshotCache

    env = load_environment("calendar")
    text = canonical_json(env.initial_state().to_json())
    cache = SnapshotCache()
    sha = hashlib.sha256(text.encode()).hexdigest()
    cache.receive(sha, text.encode(), None, env.committed, 1 << 20)
    instance = env.instance()
    serialized = []
    real = pydantic_core.to_json
    monkeypatch.setattr(pydantic_core, "to_json", lambda *a, **k: serialized.append(1) or real(*a, **k))
    instance.load_state(cache.get(sha))
    assert serialized == []
    assert instance.state.sha256() == sha


def test_snapshot_json_on_disk_is_the_canonical_state(envreg_home) -> None:
    import anyio

    async def main() -> str:
        async with Runtime() as rt:
            sb = await rt.sandbox(COUNTER)
            await sb.call_tool("increment", {"by": 3})
            return (await sb.snapshot()).address

    address = anyio.run(main)
    data = json.loads((envreg_home / "snapshots" / f"{address}.json").read_text())
    assert data["state"]["value"] == 3 and data["meta"]["env"] == "counter"


async def test_a_restore_gives_the_state_read_back_from_its_canonical_json() -> None:
    """On every path (kept by the server, or sent to another one) a restored state is the snapshot's
    canonical JSON read back: the same dict order everywhere, so tools that list give the same answers."""
    async with Runtime() as one, Runtime() as two:
        sb = await one.sandbox("calendar")
        await sb.call_tool("delete_event", {"event_id": "evt_0003"})
        await sb.call_tool(
            "create_event",
            {
                "calendar_id": "cal_0001",
                "title": "Late",
                "start": "2026-01-20T09:00:00",
                "end": "2026-01-20T10:00:00",
            },
        )
        snap = await sb.snapshot()
        read_back = load_environment("calendar").instance(snap.state)  # from the canonical JSON
        expected = json.dumps(read_back.state.to_json())  # order-sensitive: dict keys as read back
        kept = await one.sandbox("calendar", state=snap)
        sent = await two.sandbox("calendar", state=snap)
        for fork in (kept, sent):
            state = fork.server.handle.get(fork.instance_id).state
            assert json.dumps(state.to_json()) == expected
        listed = [await f.call_tool("list_events", {"day": "2026-01-06"}) for f in (kept, sent)]
        assert listed[0].text == listed[1].text


@pytest.mark.docker
async def test_a_warm_pool_can_hold_a_snapshot_so_that_forks_send_nothing(reference_images) -> None:
    async with Runtime() as rt:
        sb = await rt.sandbox("bank", isolation="container")
        await sb.call_tool("set_daily_limit", {"account_id": "acc_0001", "limit_cents": 4242})
        snap = await sb.snapshot()
        await rt.warm("bank", "container", 3, snapshot=snap)
        rt.pool_sizes.clear()
        spec = await rt.resolve("bank", "container")
        pool = rt._isolated.warm[spec.key, True]
        assert len(pool) == 3 and all(snap.sha256 in server.snapshots for server, _ in pool)
        sent = []
        for server, _ in pool:
            original = server.client.upload_snapshot

            async def counting(snapshot, original=original):
                sent.append(snapshot.sha256)
                await original(snapshot)

            server.client.upload_snapshot = counting
        forks = await rt.fork(snap, 3, isolation="container")
        assert sent == []
        assert [await f.state_sha256() for f in forks] == [snap.sha256] * 3
        with pytest.raises(SnapshotMismatch, match="taken from bank"):
            await rt.warm("calendar", "container", 1, snapshot=snap)
