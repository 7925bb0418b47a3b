"""The local sandbox tier: the Runtime / Sandbox API, snapshots, restore and fork."""

from __future__ import annotations

import json
import shutil

import pytest
from conftest import COUNTER

from envreg.canonical import canonical_json, sha256_hex
from envreg.env import UnknownToolError, load_environment, load_scenarios
from envreg.env.scenario import CallOutcome, run_steps
from envreg.errors import BadRequest
from envreg.runtime import (
    InvalidState,
    Runtime,
    SnapshotCorrupt,
    SnapshotMismatch,
    SnapshotStore,
    SyncRuntime,
)

pytestmark = pytest.mark.anyio


async def test_sandbox_calls_tools_and_exposes_state() -> None:
    async with Runtime() as rt:
        sb = await rt.sandbox(COUNTER, isolation="local")
        assert [t["name"] for t in await sb.list_tools()] == ["increment", "get"]
        assert (await sb.call_tool("increment", {"by": 4})).value == 4
        assert (await sb.state())["value"] == 4
        with pytest.raises(UnknownToolError):
            await sb.call_tool("nope")
        await sb.load_state({"value": 10})
        assert (await sb.call_tool("get")).value == 10
        with pytest.raises(InvalidState):
            await sb.load_state({"value": "x"})
        assert (await sb.call_tool("get")).value == 10
        await sb.reset()
        assert (await sb.call_tool("get")).value == 0


async def test_snapshot_restore_then_next_call_equals_the_uninterrupted_run() -> None:
    async with Runtime() as rt:
        straight = await rt.sandbox("bank")
        interrupted = await rt.sandbox("bank")
        scenario = load_scenarios(load_environment("bank").folder)[0][0]
        await straight.load_state(scenario.initial_state or await straight.state())
        await interrupted.load_state(await straight.state())
        half = len(scenario.steps) // 2

        async def play(sb, steps):
            for step in steps:
                await sb.call_tool(step.tool, step.arguments)

        await play(straight, scenario.steps)
        await play(interrupted, scenario.steps[:half])
        snap = await interrupted.snapshot()
        await interrupted.reset()
        assert await interrupted.state_sha256() != snap.sha256
        await interrupted.restore(snap)
        assert await interrupted.state_sha256() == snap.sha256
        await play(interrupted, scenario.steps[half:])
        assert await interrupted.state_sha256() == await straight.state_sha256()


async def test_snapshots_are_content_addressed_and_reloadable(envreg_home) -> None:
    async with Runtime() as rt:
        a, b = await rt.sandbox(COUNTER), await rt.sandbox(COUNTER)
        sa, sb_ = await a.snapshot(), await b.snapshot()
        assert sa.sha256 == sb_.sha256 == await a.state_sha256()
        assert sa.id == sb_.id  # same environment, same state: one snapshot
        assert (envreg_home / "snapshots" / f"{sa.address}.json").is_file()
        assert rt.snapshots.get(sa.id[:15]) == sa


async def test_forks_diverge_independently_and_leave_the_parent_alone() -> None:
    async with Runtime() as rt:
        parent = await rt.sandbox(COUNTER)
        await parent.call_tool("increment", {"by": 5})
        snap = await parent.snapshot()
        forks = await rt.fork(snap, 8)
        assert len({f.id for f in forks}) == 8
        for i, fork in enumerate(forks):
            await fork.call_tool("increment", {"by": i + 1})
        values = [(await f.call_tool("get")).value for f in forks]
        assert values == [5 + i + 1 for i in range(8)]
        assert (await parent.call_tool("get")).value == 5


async def test_restore_refuses_another_environments_snapshot() -> None:
    async with Runtime() as rt:
        bank, counter = await rt.sandbox("bank"), await rt.sandbox(COUNTER)
        before = await bank.state_sha256()
        with pytest.raises(SnapshotMismatch, match="counter"):
            await bank.restore(await counter.snapshot())
        assert await bank.state_sha256() == before


async def test_scenarios_pass_through_the_sandbox_api() -> None:
    async with Runtime() as rt:
        for scenario in load_scenarios(load_environment("calendar").folder)[0]:
            sb = await rt.sandbox("calendar", state=scenario.initial_state)

            async def call(tool, arguments, sb=sb):
                result = await sb.call_tool(tool, arguments)
                return CallOutcome(result.is_error, result.text)

            assert await run_steps(scenario, call) == []


async def test_closing_the_runtime_releases_every_sandbox() -> None:
    rt = Runtime()
    for _ in range(3):
        await rt.sandbox(COUNTER)
    assert len(rt.sandboxes) == 3
    await rt.close()
    assert rt.sandboxes == {}


def test_sync_wrapper() -> None:
    with SyncRuntime() as rt:
        sb = rt.sandbox(COUNTER)
        assert sb.call_tool("increment", {"by": 2}).value == 2
        snap = sb.snapshot()
        forks = rt.fork(snap, 2)
        assert [f.call_tool("get").value for f in forks] == [2, 2]


async def test_a_tampered_snapshot_never_loads_even_with_its_inner_hash_updated(envreg_home) -> None:
    async with Runtime() as rt:
        sb = await rt.sandbox(COUNTER)
        await sb.call_tool("increment", {"by": 2})
        snap = await sb.snapshot()
        path = envreg_home / "snapshots" / f"{snap.address}.json"
        data = json.loads(path.read_text())
        data["state"]["value"] = 1000
        data["meta"]["sha256"] = sha256_hex(canonical_json(data["state"]))  # a careful forger
        path.write_text(json.dumps(data))
        with pytest.raises(SnapshotCorrupt, match="altered"):
            rt.snapshots.get(snap.id)
        with pytest.raises(SnapshotCorrupt):
            await sb.restore(snap.id)
        assert (await sb.state())["value"] == 2


async def test_equal_states_of_two_environments_are_two_snapshots(envreg_home, tmp_path) -> None:
    twin = tmp_path / "counter_twin"
    shutil.copytree(COUNTER, twin)
    (twin / "env.py").write_text((twin / "env.py").read_text().replace('"counter"', '"counter_twin"'))
    async with Runtime() as rt:
        a, b = await rt.sandbox(COUNTER), await rt.sandbox(str(twin))
        assert await a.state() == await b.state()
        sa, sb_ = await a.snapshot(), await b.snapshot()
        assert sa.sha256 == sb_.sha256 and sa.id != sb_.id
        await b.restore(sb_.id)  # each restores its own; neither is refused as the other's
        await a.restore(sa.id)
        with pytest.raises(SnapshotMismatch):
            await a.restore(sb_.id)


@pytest.mark.parametrize("ref", ["../x", "../../etc/passwd", "sha256:", "SHA256:ABC", "zz" * 32, "abc"])
def test_snapshot_ids_are_hex_addresses_or_prefixes(envreg_home, ref) -> None:
    with pytest.raises(BadRequest, match="not a snapshot id"):
        SnapshotStore().get(ref)
