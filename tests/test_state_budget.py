"""Admission control for shared servers: the states of one server's instances stay within its memory budget.

In process, on the `InstanceStore` every server holds (the instance tier's co-tenants), with a small budget:
a write, a new instance or a loaded state that would take the server's states over it is refused naming the
budget, and changes nothing; deleting an instance frees its share.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from envreg.env import load_environment
from envreg.server.instances import InstanceLimitReached, InstanceStore, state_budget


def _event(day: int) -> dict:
    start = datetime(2026, 2, 1, 9) + timedelta(days=day)
    return {
        "calendar_id": "cal_0001",
        "title": f"Block {day}",
        "start": start.isoformat(),
        "end": (start + timedelta(minutes=30)).isoformat(),
        "description": "d" * 4000,
    }


@pytest.fixture
def store() -> InstanceStore:
    env = load_environment("calendar")
    seed = env.instance().size
    return InstanceStore(env, default=False, state_budget=3 * seed + 40_000)  # ~10 large events in all


def test_a_write_past_the_budget_is_refused_naming_it_and_changes_nothing(store: InstanceStore) -> None:
    writer, _ = store.create()
    neighbour, _ = store.create()
    refused = None
    for day in range(40):
        result = store.call_tool(writer, "create_event", _event(day))
        if result.is_error:
            refused = result.error
            break
    assert refused is not None, "the budget was never reached"
    assert "state budget" in refused and "MiB" in refused and "nothing was changed" in refused, refused
    assert 'isolation "container"' in refused
    assert store.state_bytes <= store.state_budget
    before = store.get(writer).state.sha256()
    assert store.call_tool(writer, "create_event", _event(day + 1)).is_error
    assert store.get(writer).state.sha256() == before, "a refused write left the state as it was"
    # reads and writes that do not grow the state still work
    assert not store.call_tool(writer, "list_calendars", {}).is_error
    assert not store.call_tool(neighbour, "list_calendars", {}).is_error


def test_a_new_instance_or_a_loaded_state_past_the_budget_is_refused(store: InstanceStore) -> None:
    env = store.env
    big = env.instance()
    for day in range(20):  # 80 KB: more than the whole budget
        assert not big.call_tool("create_event", _event(day)).is_error
    large = big.state.to_json()
    first, _ = store.create()
    seed_sha = store.get(first).state.sha256()
    with pytest.raises(InstanceLimitReached, match=r"the state was not replaced: .*state budget of"):
        store.load_state(first, large)
    assert store.get(first).state.sha256() == seed_sha
    with pytest.raises(InstanceLimitReached, match=r"no instance was created: .*state budget"):
        store.create(large)
    assert len(store) == 1
    # deleting frees its share; a reset gives back what the state grew
    held = store.state_bytes
    second, _ = store.create()
    assert store.state_bytes > held
    store.delete(second)
    assert store.state_bytes == held
    assert not store.call_tool(first, "create_event", _event(1)).is_error
    assert store.state_bytes > held
    store.reset(first)
    assert store.state_bytes == held


def test_the_budget_is_a_third_of_the_memory_at_six_bytes_per_byte_of_state() -> None:
    assert state_budget(256 * 1024 * 1024) == 256 * 1024 * 1024 // 18
    assert 14 * 1024 * 1024 < state_budget(256 * 1024 * 1024) < 15 * 1024 * 1024
