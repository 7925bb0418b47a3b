"""Exact JSON snapshots of plain Python objects (envreg.adapters.objects)."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import random

import pytest

from envreg.adapters.objects import SnapshotError, dump_object, load_object
from envreg.canonical import canonical_json


class Node:
    def __init__(self, name: str, parent: Node | None = None) -> None:
        self.name = name
        self.parent = parent
        self.children: dict[str, Node] = {}
        self._visits = 0


class World:
    def __init__(self) -> None:
        self.root = Node("/")
        self.root.children["b"] = Node("b", self.root)
        self.root.children["a"] = Node("a", self.root)  # insertion order b, a
        self.scores = {3: "three", 1: "one"}
        self.tags = {"z", "x"}
        self.pair = (1, 2.5)
        self.level = 25.0
        self.ratio = 0.1
        self.big = decimal.Decimal("1.10")
        self.when = dt.datetime(2026, 1, 5, 9, 30, 1, 250)
        self.odd = float("inf")
        self.blob = b"\x00\xff"
        self.shared = [1, 2]
        self.alias = self.shared
        self._cwd = self.root.children["a"]
        self._random = random.Random(42)


def roundtrip(obj: object) -> tuple[dict, object]:
    data = json.loads(canonical_json(dump_object(obj)))
    return data, load_object(data, type(obj))


def test_dump_load_dump_is_identical_and_keeps_types_order_and_references() -> None:
    world = World()
    world._random.random()
    data, back = roundtrip(world)
    assert canonical_json(dump_object(back)) == canonical_json(data)
    assert list(back.root.children) == ["b", "a"], "dict insertion order survives"
    assert back.root.children["a"].parent is back.root, "the parent link points at the same object"
    assert back._cwd is back.root.children["a"], "a private reference into the tree stays a reference"
    assert back.alias is back.shared, "aliased lists stay one list"
    assert back.scores == {3: "three", 1: "one"} and list(back.scores) == [3, 1]
    assert back.tags == {"z", "x"} and back.pair == (1, 2.5)
    assert type(back.level) is float and back.level == 25.0
    assert back.big == decimal.Decimal("1.10") and str(back.big) == "1.10"
    assert back.when == world.when and back.odd == float("inf") and back.blob == b"\x00\xff"
    assert [back._random.random() for _ in range(3)] == [world._random.random() for _ in range(3)]


def test_public_part_is_what_python_equality_sees() -> None:
    one, other = World(), World()
    other.root.children = {"a": other.root.children["a"], "b": other.root.children["b"]}  # other order
    other.level = 25  # an int where the first has 25.0: Python finds them equal
    other._visits = 99
    a, b = dump_object(one), dump_object(other)
    assert canonical_json(a["public"]) == canonical_json(b["public"])
    assert canonical_json(a["private"]) != canonical_json(b["private"])


def test_private_attributes_are_kept_apart() -> None:
    data = dump_object(World())
    assert "_cwd" not in data["public"] and "_random" not in data["public"]
    assert data["private"]["attributes"]["/public"]["_cwd"] == {"$ref": "/public/root/children/a"}
    assert "/public/root/children/a" in data["private"]["attributes"]  # the nested node's _visits


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"public": {"x": {"$object": "os:_wrap_close"}}, "private": {}}, "is not allowed"),
        ({"public": {"x": {"$ref": "/public/nowhere"}}, "private": {}}, "nothing there"),
        ({"public": {"x": {"$weird": 1}}, "private": {}}, "unknown tag"),
        ({"public": {"x": [1, 2]}, "private": {"order": {"/public/x": [0]}}}, None),
        ({"public": {"x": {"b": 1, "a": 2}}, "private": {"order": {"/public/x": [0, 0]}}}, "not an ordering"),
        ({"public": {"x": 1}, "private": {"floats": ["/public/y"]}}, "hold no number"),
        ({"public": {"x": 1}, "private": {"attributes": {"/public/z": {"_a": 1}}}}, "not in the snapshot"),
        ({"public": {"_x": 1}, "private": {}}, "not a public attribute"),
        ({"public": []}, "a snapshot is an object"),
    ],
)
def test_bad_snapshots_are_refused_with_the_reason(data: dict, message: str | None) -> None:
    if message is None:  # an order entry for a list is ignored (lists keep their own order)
        load_object(data, World)
        return
    with pytest.raises(SnapshotError, match=message):
        load_object(data, World)


def test_objects_without_a_json_form_are_named() -> None:
    world = World()
    world.callback = print
    with pytest.raises(SnapshotError, match="/public/callback"):
        dump_object(world)
