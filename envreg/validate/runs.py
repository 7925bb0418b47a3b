"""Scenario runs on a sandbox, recorded call by call (result, latency, the state before and after), so that
several checks can judge one run: expected results, final states, output schemas, transactions, latency."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from envreg.canonical import sha256_hex
from envreg.env import RejectedState, Scenario, ToolResult, states_equal
from envreg.env.scenario import CallOutcome, run_steps, state_text
from envreg.errors import InvalidState, UnknownToolError
from envreg.runtime import Sandbox
from envreg.validate.jsondiff import describe


class ReadState(dict[str, Any]):
    """A state as a sandbox gave it. Validation never changes one, so each of its canonical texts is computed
    once (`canonical_text`): the checks compare the same big states many times."""

    __slots__ = ("texts",)


def canonical_text(state: Any, volatile: Sequence[str] = ()) -> str:
    """The canonical JSON of `state` without its `volatile` paths (once per `ReadState` and paths)."""
    if not isinstance(state, ReadState):
        return state_text(state, volatile)
    try:
        texts = state.texts
    except AttributeError:
        texts = state.texts = {}
    key = tuple(volatile)
    if key not in texts:
        texts[key] = state_text(state, key)
    return texts[key]


def state_hash(state: Any) -> str:
    return sha256_hex(canonical_text(state))


@dataclass
class StepRecord:
    """One call of a scenario and what it did."""

    index: int
    tool: str
    arguments: dict[str, Any]
    result: ToolResult
    ms: float
    before: dict[str, Any]
    after: dict[str, Any]

    @property
    def changed(self) -> bool:
        return canonical_text(self.before) != canonical_text(self.after)

    @property
    def outcome(self) -> str:
        """The result as the agent sees it: ``ok <json>`` or ``error <message>``."""
        return f"error {self.result.text}" if self.result.is_error else f"ok {self.result.text}"


@dataclass
class ScenarioRun:
    """A scenario played once on one sandbox."""

    scenario: Scenario
    refused: str | None = None
    """Why its initial state was refused (then there are no steps)."""
    initial: dict[str, Any] | None = None
    steps: list[StepRecord] = field(default_factory=list)
    mismatches: list[str] = field(default_factory=list)
    """Steps whose result or error is not the expected one (`envreg.env.scenario.run_steps`)."""
    started: float = 0.0
    ended: float = 0.0

    @property
    def name(self) -> str:
        return self.scenario.name

    @property
    def final(self) -> dict[str, Any] | None:
        return self.steps[-1].after if self.steps else self.initial

    def where(self, step: StepRecord) -> str:
        """``scenario <name>, step <n> (<tool>)``."""
        return f"{self.at(step)} ({step.tool})"

    def at(self, step: StepRecord) -> str:
        """``scenario <name>, step <n>``."""
        return f"scenario {self.name}, step {step.index}"

    def final_problem(self, volatile: list[str]) -> str | None:
        """Why the final state is not the expected one, or None (also when the scenario expects none)."""
        expected = self.scenario.final_state
        if expected is None and (digest := self.scenario.final_state_sha256) and self.final is not None:
            from envreg.env.scenario import state_digest

            got = state_digest(self.final, volatile)
            return (
                None
                if got == digest
                else f"scenario {self.name}: final state's sha256 is {got}, expected {digest}"
            )
        if expected is None or self.final is None or states_equal(self.final, expected, volatile):
            return None
        from envreg.env.scenario import strip_volatile

        got, want = strip_volatile(self.final, volatile), strip_volatile(expected, volatile)
        return f"scenario {self.name}: final state differs: {describe(got, want, ('got', 'expected'))}"


async def start_state(sandbox: Sandbox, scenario: Scenario) -> str | None:
    """Put the sandbox in the scenario's initial state; the refusal's message when it is refused."""
    if scenario.initial_state is None:
        await sandbox.reset()
        return None
    try:
        await sandbox.load_state(scenario.initial_state)
    except InvalidState as exc:
        return str(exc)
    return None


async def call(sandbox: Sandbox, tool: str, arguments: dict[str, Any]) -> ToolResult:
    """A tool call whose unknown-tool refusal is an error result like any other."""
    try:
        return await sandbox.call_tool(tool, arguments)
    except UnknownToolError as exc:
        return ToolResult(error=str(exc))


async def play(sandbox: Sandbox, scenario: Scenario, steps: slice = slice(None)) -> ScenarioRun:
    """Play `scenario` (or a slice of its steps, from its initial state) and record every call."""
    run = ScenarioRun(scenario, started=time.monotonic())
    run.refused = await start_state(sandbox, scenario)
    if run.refused is not None:
        run.ended = time.monotonic()
        return run
    run.initial = ReadState(await sandbox.state())
    current = run.initial
    played = scenario.model_copy(update={"steps": scenario.steps[steps]})
    offset = range(len(scenario.steps))[steps].start if scenario.steps[steps] else 0

    async def one(tool: str, arguments: dict[str, Any]) -> CallOutcome:
        nonlocal current
        t0 = time.perf_counter()
        result = await call(sandbox, tool, arguments)
        ms = (time.perf_counter() - t0) * 1000
        after = ReadState(await sandbox.state())
        index = offset + len(run.steps) + 1
        run.steps.append(StepRecord(index, tool, arguments, result, ms, current, after))
        current = after
        return CallOutcome(result.is_error, result.text)

    run.mismatches = await run_steps(played, one)
    run.ended = time.monotonic()
    return run


async def continue_from(sandbox: Sandbox, scenario: Scenario, start: int) -> list[StepRecord]:
    """Play the scenario's steps from index `start` (0-based) on the sandbox's current state."""
    records = []
    current = ReadState(await sandbox.state())
    for i, step in enumerate(scenario.steps[start:], start + 1):
        t0 = time.perf_counter()
        result = await call(sandbox, step.tool, step.arguments)
        ms = (time.perf_counter() - t0) * 1000
        after = ReadState(await sandbox.state())
        records.append(StepRecord(i, step.tool, step.arguments, result, ms, current, after))
        current = after
    return records


@dataclass
class RejectionRecord:
    """A state the environment must refuse, and what it did with it."""

    rejected: RejectedState
    refused: str | None
    """The refusal's message (None: the state was accepted)."""
    errors: list[dict[str, Any]]
    changed: bool
    """Whether the state held before the attempt changed."""

    @property
    def problem(self) -> str | None:
        name = self.rejected.name
        if self.refused is None:
            return (
                f"rejected state {name} was accepted (expected an error containing {self.rejected.error!r})"
            )
        # the message as the control plane words it, and each problem as pydantic words it (loc, then the
        # indented message and type: what a scenario author copies from a local ValidationError)
        texts = [
            self.refused,
            *(f"{e.get('loc', '')}\n  {e.get('msg', '')} [type={e.get('type', '')}" for e in self.errors),
        ]
        if not any(self.rejected.error in t for t in texts):
            return f"rejected state {name} was refused, but not with {self.rejected.error!r}: {self.refused}"
        if self.changed:
            return f"rejected state {name} was refused, but the state held before changed"
        return None


async def reject(sandbox: Sandbox, rejected: RejectedState) -> RejectionRecord:
    """Offer a state that must be refused; check that the state held before is kept."""
    await sandbox.reset()
    before = await sandbox.state_sha256()
    refused, errors = None, []
    try:
        await sandbox.load_state(rejected.state)
    except InvalidState as exc:
        refused, errors = str(exc), exc.errors
    after = await sandbox.state_sha256()
    return RejectionRecord(rejected, refused, errors, before != after and refused is not None)
