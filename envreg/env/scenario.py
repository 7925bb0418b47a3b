"""Validation scenarios: an initial state, tool calls with expected results, an expected final state."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from envreg.canonical import canonical_equal, canonical_json, canonical_value, sha256_hex


class Step(BaseModel):
    """One tool call and what it must give."""

    model_config = ConfigDict(extra="forbid")

    tool: str = Field(description="The tool's name.")
    arguments: dict[str, Any] = Field(
        default_factory=dict, description="The call's arguments, as the agent would send them."
    )
    expect: Any = Field(
        default=None,
        description="The exact JSON result (omit to not check it; `envreg scenario record` writes it).",
    )
    expect_error: str | None = Field(
        default=None,
        description="The call must fail with an error message containing this ('' records the whole message).",
    )


class Scenario(BaseModel):
    """A call sequence on an initial state, with the results and the final state it must reach."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="The scenario's name (its file is scenarios/<name>.json).")
    description: str = Field(default="", description="What the scenario exercises, for a reviewer.")
    initial_state: dict[str, Any] | None = Field(
        default=None,
        description="The state the calls start from (omit: the seed state). Ids follow state.new_id: "
        "id_counters[prefix] is the number of the last id handed out, so a state holding evt_0007 has "
        "id_counters.evt >= 7.",
    )
    steps: list[Step] = Field(description="The calls, in order.")
    final_state: dict[str, Any] | None = Field(
        default=None,
        description="The whole state after the last call (canonical equality, volatile paths ignored); "
        "`envreg scenario record` writes it.",
    )
    final_state_sha256: str | None = Field(
        default=None,
        pattern="^[0-9a-f]{64}$",
        description="The sha256 of the whole final state's canonical JSON, volatile paths removed "
        "(`state_digest`): for states too big to commit (tau2's databases). `final_state` is checked instead "
        "where both are given.",
    )


class RejectedState(BaseModel):
    """A state that the environment must refuse to load."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="The case's name (its file is scenarios/rejected/<name>.json).")
    description: str = Field(default="", description="What is wrong with the state, for a reviewer.")
    state: dict[str, Any] = Field(description="The whole state that must be refused.")
    error: str = Field(description="A substring of the validation error it must give.")


@dataclass(slots=True)
class CallOutcome:
    """What a tier returned for one call, in the form scenarios compare."""

    is_error: bool
    text: str

    def value(self) -> Any:
        """The result as JSON data; a text that is not JSON (a foreign tool's plain string) is itself."""
        try:
            return json.loads(self.text)
        except json.JSONDecodeError:
            return self.text


@dataclass(slots=True)
class ScenarioReport:
    scenario: str
    failures: list[str] = field(default_factory=list)
    final_state: dict[str, Any] | None = None

    @property
    def passed(self) -> bool:
        return not self.failures


Caller = Callable[[str, dict[str, Any]], Awaitable[CallOutcome]]


async def run_steps(scenario: Scenario, call: Caller) -> list[str]:
    """Drive `call` through the scenario's steps; return what did not match (empty when all did)."""
    failures = []
    for i, step in enumerate(scenario.steps, 1):
        outcome = await call(step.tool, step.arguments)
        where = f"step {i} ({step.tool})"
        if step.expect_error is not None:
            if not outcome.is_error:
                failures.append(
                    f"{where}: expected an error containing {step.expect_error!r}, got {outcome.text}"
                )
            elif step.expect_error not in outcome.text:
                failures.append(f"{where}: error {outcome.text!r} does not contain {step.expect_error!r}")
        elif outcome.is_error:
            failures.append(f"{where}: unexpected error: {outcome.text}")
        elif "expect" in step.model_fields_set and outcome.value() != step.expect:
            failures.append(f"{where}: expected {canonical_json(step.expect)}, got {outcome.text}")
    return failures


def state_text(state: Any, volatile: Iterable[str] = ()) -> str:
    """The canonical JSON of `state` without its volatile paths."""
    return canonical_json(strip_volatile(state, volatile), normalized=True)


def state_digest(state: Any, volatile: Iterable[str] = ()) -> str:
    """What `final_state_sha256` states: sha256 of `state_text`."""
    return sha256_hex(state_text(state, volatile))


def strip_volatile(state: Any, paths: Iterable[str]) -> Any:
    """A copy of `state` in canonical JSON's data model (`canonical_value`) without the dotted `paths` (``*``
    matches every list item or key)."""
    return without_volatile(canonical_value(state), paths)


def without_volatile(state: Any, paths: Iterable[str]) -> Any:
    """`state` without the dotted `paths`, as it is (not normalized, unlike `strip_volatile`): only the objects
    and lists on a path are copied, the rest is shared with `state`. For comparisons (`canonical_equal`), which
    need no canonical copy of a whole state."""
    for path in paths:
        state = _without(state, path.split("."))
    return state


def _without(node: Any, parts: list[str]) -> Any:
    head, rest = parts[0], parts[1:]
    if head == "*":
        if isinstance(node, dict):
            return {k: _without(v, rest) for k, v in node.items()} if rest else {}
        if isinstance(node, list):
            return [_without(v, rest) for v in node] if rest else []
        return node
    if not isinstance(node, dict) or head not in node:
        return node
    copy = dict(node)
    if rest:
        copy[head] = _without(node[head], rest)
    else:
        del copy[head]
    return copy


def states_equal(a: Any, b: Any, volatile: Iterable[str] = ()) -> bool:
    """Canonical equality of two states, ignoring volatile paths (`canonical_equal`: nothing is written)."""
    paths = list(volatile)
    return canonical_equal(without_volatile(a, paths), without_volatile(b, paths))


def load_scenarios(folder: Path) -> tuple[list[Scenario], list[RejectedState]]:
    """Read ``scenarios/*.json`` and ``scenarios/rejected/*.json`` under an environment folder."""
    root = folder / "scenarios"
    scenarios = [Scenario.model_validate_json(p.read_text()) for p in sorted(root.glob("*.json"))]
    rejected = [
        RejectedState.model_validate_json(p.read_text()) for p in sorted((root / "rejected").glob("*.json"))
    ]
    return scenarios, rejected
