"""Equal states hash the same whatever order their sets were filled in, and in every process: a set field's
items are written sorted, at any depth (CI once saw a copy-on-write state and its deep-copy reference hash
differently because a set iterated in another order)."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from typing import Optional

from pydantic import BaseModel, Field

from envreg.env import EnvState
from envreg.env.set_order import set_fixer

WORDS = [f"tag-{n}" for n in range(40)]


class Node(BaseModel):
    tags: set[str] = Field(default_factory=set)
    kids: list[Node] = Field(default_factory=list)


class Sets(EnvState):
    top: set[str] = Field(default_factory=set)
    numbers: dict[str, frozenset[int]] = Field(default_factory=dict)
    maybe: Optional[set[str]] = None  # noqa: UP045 - the typing.Union spelling, on purpose
    pair: tuple[int, set[str]] = (0, set())
    tree: Node = Field(default_factory=Node)
    ordered: list[str] = Field(default_factory=list)


def filled(order: list[str]) -> Sets:
    """The same state, its sets filled in `order` (set iteration order follows insertion and collisions)."""
    numbers = [int(w.removeprefix("tag-")) for w in order]
    return Sets(
        top=set(order),
        numbers={"k": frozenset(numbers)},
        maybe=set(reversed(order)),
        pair=(1, set(order)),
        tree=Node(tags=set(order), kids=[Node(tags={w for w in order if w.endswith(("0", "5"))})]),
        ordered=list(WORDS),
    )


def test_sets_filled_in_any_order_give_one_canonical_text_and_hash() -> None:
    rng = random.Random(7)
    first = filled(WORDS)
    for _ in range(20):
        order = rng.sample(WORDS, len(WORDS))
        again = filled(order)
        assert again.canonical() == first.canonical()
        assert again.sha256() == first.sha256()
        assert again.to_json() == first.to_json() == json.loads(first.canonical())
    data = json.loads(first.canonical())
    assert data["top"] == sorted(WORDS) and data["numbers"]["k"] == list(range(40))
    assert data["pair"][1] == sorted(WORDS) and data["tree"]["kids"][0]["tags"] == sorted(
        w for w in WORDS if w[-1] in "05"
    )
    assert data["ordered"] == WORDS, "a list keeps its order"


def test_a_state_hashes_the_same_under_every_hash_seed() -> None:
    script = (
        "import sys; sys.path.insert(0, 'tests'); from test_set_order import filled, WORDS;"
        "print(filled(WORDS[::-1]).sha256())"
    )
    hashes = set()
    for seed in ("0", "1", "2", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run(
            [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
        )
        hashes.add(done.stdout.strip())
    assert hashes == {filled(WORDS).sha256()}


def test_models_without_sets_are_left_alone() -> None:
    class Plain(EnvState):
        items: list[str] = Field(default_factory=list)
        by_id: dict[str, list[int]] = Field(default_factory=dict)

    assert set_fixer(Plain) is None
    assert Plain(items=["b", "a"]).to_json()["items"] == ["b", "a"]
