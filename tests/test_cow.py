"""Committed states: writes journaled and committed into a new tree that shares what did not change.

Each test compares with the reference semantics (a deep copy, the tool on it, a full revalidation).
"""

from __future__ import annotations

import copy
import heapq
import json
import pickle
import random
from typing import Any

import pydantic_core
import pytest
from conftest import REFERENCE_ENVS, scaled
from cow_helpers import initial_states, random_calls, reference_call
from pydantic import BaseModel, Field, field_validator, model_validator

from envreg.canonical import canonical_json
from envreg.env import Environment, EnvState, ToolError, load_environment, states_equal
from envreg.env.cow import CommittedStateError, TDict, TList, TSet, is_committed


class Item(BaseModel):
    id: str
    qty: int = Field(ge=0)
    tags: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _check(self) -> Item:
        if len(set(self.tags)) != len(self.tags):
            raise ValueError("duplicate tag")
        return self


class Shelf(EnvState):
    items: dict[str, Item] = Field(default_factory=dict)
    log: list[str] = Field(default_factory=list)
    labels: set[str] = Field(default_factory=set)
    nested: dict[str, list[Item]] = Field(default_factory=dict)
    archive: dict[str, Item] = Field(default_factory=dict)
    note: str = ""

    @field_validator("note")
    @classmethod
    def _short(cls, value: str) -> str:
        if len(value) > 20:
            raise ValueError("note too long")
        return value.strip()


def shelf_env() -> Environment:
    env = Environment("shelf", Shelf, version="1.0.0")
    env.seed = {
        "items": {f"i{n}": {"id": f"i{n}", "qty": n, "tags": ["a"]} for n in range(5)},
        "log": ["start"],
        "labels": ["x"],
        "nested": {"k": [{"id": "n1", "qty": 1}]},
    }

    @env.tool
    def set_qty(state: Shelf, item_id: str, qty: int, then_fail: bool = False) -> Item:
        """Set a quantity.

        Args:
            item_id: Which item.
            qty: The new quantity.
            then_fail: Raise after writing.
        """
        item = state.items[item_id]
        item.qty = qty
        state.log.append(f"set {item_id}")
        if then_fail:
            raise ToolError("failed after writing")
        return item

    @env.tool
    def add(state: Shelf, item_id: str, tag: str = "a") -> Item:
        """Add an item.

        Args:
            item_id: Its id.
            tag: One tag.
        """
        item = Item(id=item_id, qty=0)
        state.items[item_id] = item
        item.tags.append(tag)  # changed after it was stored: the stored one changes too
        state.labels.add(tag)
        return item

    @env.tool
    def tag(state: Shelf, item_id: str, tag: str) -> list[str]:
        """Tag an item (a duplicate tag is refused by the item's own validator).

        Args:
            item_id: Which item.
            tag: The tag.
        """
        state.items[item_id].tags.append(tag)
        return state.items[item_id].tags

    @env.tool
    def archive(state: Shelf, item_id: str, bump: bool = False) -> None:
        """Move an item to the archive.

        Args:
            item_id: Which item.
            bump: Also change it while moving it.
        """
        item = state.items.pop(item_id)
        state.archive[item_id] = item
        if bump:
            item.qty += 1

    @env.tool
    def alias(state: Shelf, item_id: str) -> None:
        """Store an item a second time, then change it through the first place.

        Args:
            item_id: Which item.
        """
        state.archive[item_id] = state.items[item_id]
        state.items[item_id].qty += 100

    @env.tool
    def shuffle(state: Shelf, seed: int) -> list[str]:
        """Reorder the items: pop them all and put them back in another order, then sort the log.

        Args:
            seed: The order.
        """
        items = [state.items.pop(k) for k in list(state.items)]
        random.Random(seed).shuffle(items)
        for item in items:
            state.items[item.id] = item
        state.log.sort(reverse=True)
        state.nested["k"][0].qty += 1
        return list(state.items)

    @env.tool
    def bypass(state: Shelf) -> None:
        """Reach the items through vars(), a route the journal does not see, and change them.

        Args:
        """
        items = vars(state)["items"]
        for key in list(dict.keys(items)):
            item = dict.__getitem__(items, key)
            item.qty += 1

    @env.tool
    def noted(state: Shelf, note: str) -> str:
        """Set the note (stripped; over 20 characters refused).

        Args:
            note: The note.
        """
        state.note = note
        return state.note

    @env.tool(read_only=True)
    def sneaky(state: Shelf) -> int:
        """A read-only tool that writes (a bug).

        Args:
        """
        state.items["i1"].qty = 99
        return 1

    return env


def run_both(env: Environment, calls: list[tuple[str, dict]]) -> None:
    """Every call gives the same result and the same state as the reference, and old states stay."""
    instance = env.instance()
    reference = env.initial_state()
    history = []
    for name, arguments in calls:
        before = instance.state
        history.append((before, canonical_json(before.to_json())))
        result = instance.call_tool(name, arguments)
        reference, expected = reference_call(env, reference, name, arguments)
        assert (result.is_error, result.text) == (expected.is_error, expected.text), (name, arguments)
        assert instance.state.canonical() == reference.canonical(), (name, arguments)
        assert instance.state.sha256() == reference.sha256()
    for state, text in history:
        assert canonical_json(state.to_json()) == text, "a committed state changed"


def test_writes_commit_a_new_state_and_leave_the_old_one() -> None:
    env = shelf_env()
    instance = env.instance()
    old = instance.state
    result = instance.call_tool("set_qty", {"item_id": "i2", "qty": 7})
    assert not result.is_error and result.value["qty"] == 7
    assert old.items["i2"].qty == 2 and instance.state.items["i2"].qty == 7
    assert instance.state is not old and is_committed(instance.state)
    # untouched parts are shared, the path to the change is new
    assert instance.state.items["i1"] is old.items["i1"]
    assert instance.state.nested is old.nested and instance.state.labels is old.labels
    assert instance.state.items is not old.items and instance.state.log is not old.log
    assert type(instance.state.items) is TDict and type(instance.state.log) is TList
    assert type(instance.state.labels) is TSet


def test_a_failing_call_changes_nothing() -> None:
    env = shelf_env()
    instance = env.instance()
    before = instance.state
    text = instance.state.canonical()
    result = instance.call_tool("set_qty", {"item_id": "i2", "qty": 7, "then_fail": True})
    assert result.is_error and "failed after writing" in result.text
    assert instance.state is before and canonical_json(before.to_json()) == text
    refused = instance.call_tool("set_qty", {"item_id": "i2", "qty": -1})  # Item's qty >= 0
    assert refused.is_error and "greater than or equal to 0" in refused.text
    assert canonical_json(instance.state.to_json()) == text
    dup = instance.call_tool("tag", {"item_id": "i1", "tag": "a"})  # Item's model validator
    assert dup.is_error and "duplicate tag" in dup.text
    assert canonical_json(instance.state.to_json()) == text


def test_field_validators_run_and_normalize() -> None:
    env = shelf_env()
    instance = env.instance()
    assert instance.call_tool("noted", {"note": "x" * 30}).is_error
    result = instance.call_tool("noted", {"note": "  hi  "})
    assert result.value == "  hi  " and instance.state.note == "hi"


@pytest.mark.parametrize(
    "calls",
    [
        [("add", {"item_id": "new", "tag": "b"}), ("set_qty", {"item_id": "new", "qty": 3})],
        [("archive", {"item_id": "i1"}), ("set_qty", {"item_id": "i2", "qty": 1})],
        [("archive", {"item_id": "i1", "bump": True})],
        [("alias", {"item_id": "i3"}), ("set_qty", {"item_id": "i3", "qty": 0})],
        [("shuffle", {"seed": 3}), ("set_qty", {"item_id": "i0", "qty": 5, "then_fail": True})],
        [("shuffle", {"seed": 1}), ("shuffle", {"seed": 2}), ("archive", {"item_id": "i4"})],
    ],
)
def test_same_as_a_deep_copy(calls) -> None:
    run_both(shelf_env(), calls)


def test_a_write_the_journal_cannot_place_runs_again_on_a_copy() -> None:
    env = shelf_env()
    run_both(env, [("bypass", {}), ("noted", {"note": " a "}), ("bypass", {})])
    instance = env.instance()
    assert not instance.call_tool("bypass", {}).is_error
    assert instance.slow_calls == 1 and instance.state.items["i1"].qty == 2


def test_a_read_only_tool_cannot_write() -> None:
    env = shelf_env()
    instance = env.instance()
    result = instance.call_tool("sneaky", {})
    assert result.is_error and "read-only" in result.text
    assert instance.state.items["i1"].qty == 1


def test_committed_states_refuse_writes_outside_tools() -> None:
    instance = shelf_env().instance()
    with pytest.raises(CommittedStateError, match="committed state"):
        instance.state.items["i1"].qty = 5
    with pytest.raises(CommittedStateError):
        instance.state.log.append("x")
    with pytest.raises(CommittedStateError):
        instance.state.labels.add("y")
    with pytest.raises(CommittedStateError):
        del instance.state.items["i1"]


def test_copies_of_committed_states_are_plain_and_writable() -> None:
    instance = shelf_env().instance()
    for copied in (
        instance.state.model_copy(deep=True),
        copy.deepcopy(instance.state),
        pickle.loads(pickle.dumps(instance.state)),
    ):
        assert not is_committed(copied) and type(copied.items) is dict
        copied.items["i1"].qty = 5
        copied.log.append("x")
    assert instance.state.items["i1"].qty == 1


def test_undo_keeps_the_order_of_keys() -> None:
    env = shelf_env()
    instance = env.instance()
    order = list(instance.state.items)
    assert instance.call_tool("archive", {"item_id": "zzz"}).is_error  # pop of a missing key raises
    result = instance.call_tool("shuffle", {"seed": 5})
    assert list(instance.state.items) == result.value != order
    instance2 = env.instance()
    state = instance2.state
    # a call that reorders and then fails leaves the original order
    instance2.call_tool("set_qty", {"item_id": "i0", "qty": 1, "then_fail": True})
    assert list(state.items) == order


@pytest.mark.parametrize("name", REFERENCE_ENVS)
def test_every_tool_of_every_environment_matches_a_deep_copy(name: str) -> None:
    """Random calls (half of them failing half way) on the catalog: the same results and canonical
    bytes as a deep copy with a full revalidation (volatile paths aside: BFCL's file system stamps
    files with the wall clock), and every state the instance held before is intact. 120 calls from each
    starting state under `scripts/test --full` (CI), 40 elsewhere."""
    env = load_environment(name)
    rng = random.Random(1414)
    for start in initial_states(env):
        instance = env.instance(start)
        reference = env.parse_state(start) if start is not None else env.initial_state()
        history = []
        for tool, arguments in random_calls(env, rng, scaled(120, 40)):
            history.append((instance.state, instance.state.canonical()))
            result = instance.call_tool(tool, arguments)
            reference, expected = reference_call(env, reference, tool, arguments)
            assert (result.is_error, result.text) == (expected.is_error, expected.text), (tool, arguments)
            assert states_equal(instance.state.to_json(), reference.to_json(), env.volatile), (
                tool,
                arguments,
            )
            assert instance.size == len(pydantic_core.to_json(instance.state)), "incremental size"
            assert instance.state.canonical() == canonical_json(instance.state.to_json()), "canonical text"
        for state, text in history:
            assert canonical_json(state.to_json()) == text, f"{name}: a committed state changed"
        assert instance.slow_calls == 0, f"{name}: {instance.slow_calls} calls took the slow path"


class Tags(EnvState):
    tags: list[str] = []


def test_a_write_past_the_journal_shows_in_every_fresh_read() -> None:
    """`heapq.heappush` writes into a committed list in place (C code, no journal): the cached text of
    that committed state goes stale, so the server's state reads serialize again and show the write."""
    env = Environment("tags", Tags, version="1.0.0")

    @env.tool
    def push(state: Tags, tag: str) -> str:
        """Push a tag, then fail.

        Args:
            tag: The tag.
        """
        heapq.heappush(state.tags, tag)
        raise ToolError("refused after writing")

    instance = env.instance()
    cached = instance.state.canonical()
    assert instance.call_tool("push", {"tag": "a"}).is_error
    assert instance.state.canonical() == cached  # the memo of the committed state
    assert json.loads(instance.state.canonical(cached=False))["tags"] == ["a"]


class Dial(EnvState):
    count: int = 0
    on: bool = False
    label: str = ""
    level: int = Field(default=0, ge=0, le=10)
    code: str = ""
    flags: list[bool] = Field(default_factory=list)
    sizes: dict[str, float] = Field(default_factory=dict)

    @field_validator("code")
    @classmethod
    def _upper(cls, value: str) -> str:
        return value.upper()


def dial_env() -> Environment:
    env = Environment("dial", Dial, version="1.0.0")

    @env.tool
    def put(state: Dial, field: str, value: Any, key: str | None = None) -> Any:
        """Store a value as it comes, unconverted: in a root field, appended to a list, or under a key.

        Args:
            field: Which field.
            value: The value.
            key: Under this key of a dict field; a list field's value is appended.
        """
        if key is not None:
            getattr(state, field)[key] = value
        elif isinstance(getattr(state, field), list):
            getattr(state, field).append(value)
        else:
            setattr(state, field, value)
        return value

    return env


@pytest.mark.filterwarnings("ignore:Pydantic serializer warnings")  # the reference dumps the raw value
@pytest.mark.parametrize(
    ("arguments", "stored"),
    [
        ({"field": "count", "value": 5}, 5),  # bare fields take a value of their own type as it is
        ({"field": "on", "value": True}, True),
        ({"field": "label", "value": " x "}, " x "),
        ({"field": "count", "value": "7"}, 7),  # ... and validate any other: converted, or refused
        ({"field": "on", "value": 1}, True),
        ({"field": "count", "value": 1.5}, None),
        ({"field": "label", "value": 3}, None),
        ({"field": "level", "value": 4}, 4),  # constraints and validators run on values of the field's type
        ({"field": "level", "value": 11}, None),
        ({"field": "code", "value": "ab"}, "AB"),
        ({"field": "flags", "value": 1}, [True]),  # entries of collections are converted alike
        ({"field": "sizes", "value": 2, "key": "a"}, {"a": 2.0}),
    ],
)
def test_a_write_is_kept_converted_or_refused_as_a_full_validation_would(arguments, stored) -> None:
    env = dial_env()
    instance = env.instance()
    before = canonical_json(instance.state.to_json())
    result = instance.call_tool("put", arguments)
    reference, expected = reference_call(env, env.initial_state(), "put", arguments)
    assert result.is_error == expected.is_error == (stored is None)
    if stored is None:
        assert canonical_json(instance.state.to_json()) == before
        return
    value = getattr(instance.state, arguments["field"])
    assert value == stored and repr(value) == repr(stored)  # True, not 1; 2.0, not 2
    assert instance.state.canonical() == reference.canonical()
