"""The composite reward: replay the predicted calls in sandboxes seeded from the record, compare with the oracle.

A unit (a turn, or a whole record scored at once) scores

``R = max(0, a*R_traj + (1-a)*R_outcome - g*P_length - b*P_format)``, or 0 when a gate shuts,

- `R_traj`: the share of the oracle's calls found in the prediction (one-to-one; masked arguments
  ignored; numbers within tolerance; arguments normalized by the tool's own model, so defaults and
  equivalent spellings match; in order with ``ordered``).
- `R_outcome`: for a unit that changes state, `R_state`: per environment, the replayed final state
  against the oracle's (canonical JSON, volatile paths ignored), 1 or 0, or entity-level partial
  credit with ``partial_state``; averaged. For a read-only unit, where an unchanged state proves
  nothing, ``R_state * R_response * R_answer``: the state must be left as it was, the oracle calls'
  results must have been obtained by the prediction's calls (`R_response`, BFCL's response check),
  and the answer must state the unit's facts (`R_answer`, `envreg.reward.answer`).
- `P_length`: calls beyond the oracle's count (its failed attempts included), relative to it (at
  most 1). A retry after an injected error is not counted.
- `P_format`: the share of call attempts that could not be read.

A unit that expects no call (a request to ask about or decline) is scored by its outcome alone.

Gates (the unit scores 0): ``no_calls`` (calls were expected and none could be read: empty, prose,
refusals, malformed calls), ``forbidden_tool`` (a tool the task forbids), ``write_in_read_only_turn``
(a writing tool the oracle did not use, where only reads were asked), ``no_answer`` (no call was
expected and the model said nothing).

Unknown tools, bad arguments and malformed calls are counted in the breakdown, never raised.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from envreg.env import Environment, EnvironmentNotFound, UnknownToolError, load_environment, states_equal
from envreg.env.augment import Augmentation
from envreg.env.tool import ToolResult
from envreg.reward.answer import Fact, missing_facts, unit_facts, with_facts
from envreg.reward.match import (
    arguments_match,
    entity_score,
    max_matching,
    normalized_arguments,
    result_obtained,
)
from envreg.reward.parse import ParsedOutput, PredictedCall, parse_output, split_qualified
from envreg.reward.truth import GroundTruth, TruthCall, read_truth
from envreg.runtime import Runtime, Sandbox

Status = Literal["ok", "tool_error", "bad_arguments", "unknown_tool", "injected_error", "distractor"]
Gate = Literal["no_calls", "forbidden_tool", "write_in_read_only_turn", "no_answer"]
BAD_ARGUMENTS = "Invalid arguments for tool"


class ScoreOptions(BaseModel):
    """Weights and matching rules."""

    model_config = ConfigDict(strict=True)  # `true` is not a tolerance

    alpha: float = Field(default=0.5, ge=0, le=1, description="Weight of R_traj; R_outcome gets 1 - alpha.")
    gamma: float = Field(default=0.1, ge=0, description="Weight of the length penalty.")
    beta: float = Field(default=0.1, ge=0, description="Weight of the format penalty.")
    ordered: bool = Field(default=False, description="Oracle calls must appear in their order.")
    partial_state: bool = Field(default=False, description="Entity-level partial credit for R_state.")
    rel_tol: float = Field(default=1e-6, ge=0, description="Relative tolerance for numbers.")
    abs_tol: float = Field(default=1e-9, ge=0, description="Absolute tolerance for numbers.")
    check_answer: bool = Field(
        default=True,
        description="Read-only units: the answer must state the facts (turn off for a policy that never "
        "sees its calls' results).",
    )


class CallReport(BaseModel):
    env: str | None
    tool: str
    status: Status
    matched: bool = False
    write: bool = Field(default=False, description="The tool is not read-only.")
    forbidden: bool = Field(default=False, description="The task forbids the tool.")


class StateReport(BaseModel):
    env: str
    equal: bool
    score: float
    differing: list[str] = Field(default_factory=list, description="Entities that differ (partial_state).")


class TurnScore(BaseModel):
    """One scored unit (a turn, or a whole record at once), component by component."""

    id: str = ""
    reward: float
    r_traj: float
    r_state: float
    r_response: float = Field(default=1.0, description="Share of the oracle's results obtained (read-only).")
    r_answer: float = Field(default=1.0, description="Share of the facts the answer states (read-only).")
    p_length: float
    p_format: float
    read_only: bool = False
    gate: Gate | None = Field(default=None, description="Why the unit scored 0 whatever else it did.")
    expected_calls: int
    predicted_calls: int
    matched_calls: int
    obtained_results: int = 0
    malformed: int = 0
    unknown_tools: int = 0
    bad_arguments: int = 0
    tool_errors: int = 0
    injected_errors: int = 0
    distractor_calls: int = 0
    forbidden_calls: int = 0
    states: list[StateReport] = Field(default_factory=list)
    calls: list[CallReport] = Field(default_factory=list)
    missing: list[str] = Field(default_factory=list, description="Oracle calls not found, as env.tool.")
    missing_facts: list[Fact] = Field(default_factory=list, description="Facts the answer does not state.")
    problems: list[str] = Field(default_factory=list, description="Why each malformed call was unreadable.")


class RewardBreakdown(TurnScore):
    """One scored prediction: the reward and its components, and each turn's (`turns`).

    Scored at once (`Scorer.score`), the prediction is one unit and `turns` holds it; scored turn by
    turn (`Scorer.score_turns`), the reward and its components are the turns' means, the counts
    their sums, and `states` the last turn's.
    """

    turns: list[TurnScore] = Field(default_factory=list)


class Scorer:
    """Scores predictions against records on one isolation tier, reusing its sandboxes.

    ```python
    async with Runtime() as rt:
        scorer = Scorer(rt, isolation="local")
        breakdown = await scorer.score(record, model_output)            # the record as one unit
        per_turn = await scorer.score_turns(record, [turn_1, turn_2])   # one output per turn
    ```
    """

    def __init__(
        self,
        runtime: Runtime,
        *,
        isolation: str = "local",
        options: ScoreOptions | None = None,
        sources: Mapping[str, str | Environment] | None = None,
        only_sources: str | None = None,
    ) -> None:
        self.runtime = runtime
        self.isolation = isolation
        self.options = options or ScoreOptions()
        self.sources = dict(sources or {})  # environment name -> Environment, folder or image reference
        self.only_sources = only_sources
        """Where set, `sources` is a server's whole catalog and this says how to add to it: a record naming
        anything else, a path like ``../somewhere/env`` included, is refused (this is the refusal's hint)
        and nothing of it is imported."""
        self._idle: dict[str, list[Sandbox]] = defaultdict(list)
        self._tools: dict[str, dict[str, dict[str, Any]]] = {}
        self._code: dict[str, Any] = {}

    async def score(
        self, truth: Any, output: Any, options: ScoreOptions | None = None, *, oracle: bool = False
    ) -> RewardBreakdown:
        """Score `output` (raw model output, see `parse_output`) against `truth` (a record, see `read_truth`)
        as one unit: a turn of an RL row, or a whole record.

        With ``oracle=True`` the record's own calls (and answer) are the prediction (a check of the record).
        """
        truth = read_truth(truth)
        return await self._episode(truth, [truth], [None if oracle else output], options, oracle)

    async def score_turns(
        self,
        truth: Any,
        outputs: Sequence[Any],
        options: ScoreOptions | None = None,
        *,
        oracle: bool = False,
    ) -> RewardBreakdown:
        """Score a model's turns against a record's, one output per turn, replayed one after the other
        in the same sandboxes (as the episode ran); `RewardBreakdown.turns` holds each turn's score.

        A turn that changes state is compared with the oracle's state after that turn; a read-only
        turn must leave the state as the turn before left it. Raises `ValueError` when the record
        keeps no per-turn states or the number of outputs is not the number of turns.
        """
        truth = read_truth(truth)
        units = truth.units()
        if oracle:
            outputs = [None] * len(units)
        if len(outputs) != len(units):
            raise ValueError(
                f"{truth.id or 'the record'} has {len(units)} turns but {len(outputs)} outputs were "
                "given: pass one output per turn"
            )
        return await self._episode(truth, units, list(outputs), options, oracle)

    async def _episode(
        self,
        truth: GroundTruth,
        units: list[GroundTruth],
        outputs: list[Any],
        options: ScoreOptions | None,
        oracle: bool,
    ) -> RewardBreakdown:
        opts = options or self.options
        parsed = [
            ParsedOutput(calls=[PredictedCall(c.tool, c.arguments, c.env) for c in u.calls], text=u.answer)
            if oracle
            else parse_output(output)
            for u, output in zip(units, outputs, strict=True)
        ]
        sandboxes: dict[str, Sandbox] = {}
        scores: list[TurnScore] = []
        try:
            for env in truth.envs:
                sandboxes[env] = await self._acquire(env, truth)
            labelled: dict[str, int] = defaultdict(int)  # per environment, augmentation labels consumed
            before = truth.initial_states
            for k, (unit, prediction) in enumerate(zip(units, parsed, strict=True)):
                if k:  # each turn is an augmentation session of its own (as its RL row's rollouts are)
                    for env, augmentation in truth.augmentation.items():
                        await sandboxes[env].augment(augmentation)
                        labelled[env] = 0
                calls, resolved, outcomes = await self._replay(unit, prediction.calls, sandboxes, labelled)
                got = {env: await sb.state() for env, sb in sandboxes.items()}
                states = [self._state_report(env, unit, got[env], before[env], opts) for env in truth.envs]
                results = await self._oracle_results(unit) if unit.read_only and unit.required else []
                scores.append(
                    self._combine(unit, prediction, calls, resolved, outcomes, states, results, opts, oracle)
                )
                before = got
        finally:
            for env, sb in sandboxes.items():
                await self._release(env, sb)
        return _breakdown(truth, scores)

    def source(self, env: str) -> str | Environment:
        """Where the environment a record names comes from (`sources`, else the name itself)."""
        if env in self.sources:
            return self.sources[env]
        if self.only_sources is not None:
            known = ", ".join(sorted(self.sources)[:20]) or "none"
            raise EnvironmentNotFound(
                f"environment {env[:80]!r} is not in this server's catalog (known: {known})",
                self.only_sources,
            )
        return env

    # sandboxes ------------------------------------------------------------------------------------
    async def _acquire(self, env: str, truth: GroundTruth, augment: bool = True) -> Sandbox:
        """A sandbox of `env` in the record's initial state: an idle one reset to it, or a new one.

        Raises `InvalidState` (a `ValueError`) when the environment refuses the initial state.
        """
        idle = self._idle[env]
        while idle:
            sb = idle.pop()
            if sb.ended is None:
                sb.renew(self.runtime.lease_ttl)
                try:
                    await sb.load_state(truth.initial_states[env])
                except ValueError:
                    idle.append(sb)  # refused, unchanged: still good for the next record
                    raise
                break
        else:
            sb = await self.runtime.sandbox(
                self.source(env),
                isolation=self.isolation,  # type: ignore[arg-type]
                state=truth.initial_states[env],
            )
        if env not in self._tools:
            self._tools[env] = {t["name"]: t for t in await sb.list_tools()}
        augmentation = truth.augmentation.get(env)
        if augment and augmentation is not None:
            await sb.augment(augmentation)
        return sb

    async def _release(self, env: str, sb: Sandbox) -> None:
        if sb.ended is not None:
            return
        if sb.augmented:
            await sb.augment(None)
        self._idle[env].append(sb)

    async def close(self) -> None:
        """Close every idle sandbox (the runtime closes the rest when it exits)."""
        for idle in self._idle.values():
            while idle:
                await idle.pop().close()

    async def _oracle_results(self, unit: GroundTruth) -> list[Any]:
        """The results of the unit's required oracle calls: from the record, or by replaying its calls."""
        if unit._results is None:
            if all(c.has_result for c in unit.required):
                unit._results = [c.result for c in unit.required]
            else:
                sandboxes = {env: await self._acquire(env, unit, augment=False) for env in unit.envs}
                try:
                    results, required = [], {id(c) for c in unit.required}
                    for call in unit.calls:
                        outcome = await sandboxes[call.env].call_tool(call.tool, call.arguments)
                        if id(call) in required:
                            results.append(outcome.text if outcome.is_error else outcome.value)
                finally:
                    for env, sb in sandboxes.items():
                        await self._release(env, sb)
                unit._results = results
        return unit._results

    # replay ---------------------------------------------------------------------------------------
    def _resolve(self, call: PredictedCall, truth: GroundTruth) -> tuple[str | None, str]:
        """(env, tool) for a predicted call; env None when no environment of the record has the tool."""
        env, tool = call.env, call.tool
        if env is None:
            env, tool = split_qualified(tool, truth.envs)
        if env is not None:
            return (env, tool) if env in truth.envs and self._offers(env, tool, truth) else (None, tool)
        return next((e for e in truth.envs if self._offers(e, tool, truth)), None), tool

    def _offers(self, env: str, tool: str, truth: GroundTruth) -> bool:
        if tool in self._tools[env]:
            return True
        augmentation = truth.augmentation.get(env)
        return augmentation is not None and any(d["name"] == tool for d in augmentation.distractors)

    def _report(self, env: str, tool: str, status: Status, truth: GroundTruth) -> CallReport:
        spec = self._tools[env].get(tool)
        write = spec is not None and not (spec.get("annotations") or {}).get("readOnlyHint", False)
        forbidden = f"{env}.{tool}" in truth.forbidden or tool in truth.forbidden
        return CallReport(env=env, tool=tool, status=status, write=write, forbidden=forbidden)

    async def _replay(
        self,
        truth: GroundTruth,
        calls: list[PredictedCall],
        sandboxes: dict[str, Sandbox],
        labelled: dict[str, int],
    ) -> tuple[list[CallReport], list[tuple[str, str, dict[str, Any]] | None], list[ToolResult | None]]:
        reports: list[CallReport] = []
        resolved: list[tuple[str, str, dict[str, Any]] | None] = []
        outcomes: list[ToolResult | None] = []
        sent: dict[str, list[int]] = defaultdict(list)  # env -> indexes of the calls sent to it
        for call in calls:
            env, tool = self._resolve(call, truth)
            if env is None:
                reports.append(CallReport(env=call.env, tool=call.tool, status="unknown_tool"))
                resolved.append(None)
                outcomes.append(None)
                continue
            try:
                result = await sandboxes[env].call_tool(tool, call.arguments)
            except UnknownToolError:
                reports.append(CallReport(env=env, tool=tool, status="unknown_tool"))
                resolved.append(None)
                outcomes.append(None)
                continue
            status: Status = "ok"
            if result.is_error:
                status = "bad_arguments" if result.text.startswith(BAD_ARGUMENTS) else "tool_error"
            reports.append(self._report(env, tool, status, truth))
            resolved.append((env, tool, call.arguments))
            outcomes.append(result)
            sent[env].append(len(reports) - 1)
        for env, indexes in sent.items():
            if env not in truth.augmentation:
                continue
            labels = (await sandboxes[env].augmentation_labels())[labelled[env] :]
            labelled[env] += len(indexes)
            for index, label in zip(indexes, labels, strict=False):
                kind = label.get("kind")
                if kind in ("injected_error", "distractor"):
                    reports[index].status = kind
                    reports[index].write = False
                    resolved[index] = None
                    outcomes[index] = None
                elif label.get("noise") and (outcome := outcomes[index]) is not None:
                    outcomes[index] = _denoised(outcome, label["noise"])
        return reports, resolved, outcomes

    # states ---------------------------------------------------------------------------------------
    def _state_report(
        self,
        env: str,
        truth: GroundTruth,
        got: dict[str, Any],
        before: dict[str, Any],
        opts: ScoreOptions,
    ) -> StateReport:
        """The replayed state of `env` against the oracle's after the unit; for a read-only unit,
        against the state the unit started from (what the model's earlier turns left)."""
        volatile = truth.volatile.get(env, [])
        start, expected = (
            (before, before) if truth.read_only else (truth.initial_states[env], truth.final_states[env])
        )
        if not volatile and states_equal(got, expected):
            return StateReport(env=env, equal=True, score=1.0)
        score, differing = entity_score(start, expected, got, volatile)
        equal = not differing
        return StateReport(
            env=env,
            equal=equal,
            score=score if opts.partial_state else float(equal),
            differing=differing[:50],
        )

    # arguments ------------------------------------------------------------------------------------
    def _normalize(self, env: str, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """Arguments as the tool itself reads them (defaults filled, values in JSON form), when it can."""
        if env not in self._code:
            source = self.source(env)
            try:
                self._code[env] = source if isinstance(source, Environment) else load_environment(source)
            except (EnvironmentNotFound, OSError):
                self._code[env] = None
        normalized = normalized_arguments(self._code[env], tool, arguments)
        if normalized is not None:
            return normalized
        defaults = {
            k: p["default"]
            for k, p in self._tools[env].get(tool, {}).get("inputSchema", {}).get("properties", {}).items()
            if "default" in p
        }
        return {**defaults, **arguments}

    def _wanted(self, truth: GroundTruth) -> list[dict[str, Any]]:
        """The oracle's required arguments, normalized once per record."""
        if truth._normalized is None:
            truth._normalized = [self._normalize(c.env, c.tool, c.arguments) for c in truth.required]
        return truth._normalized

    def _combine(
        self,
        truth: GroundTruth,
        parsed: ParsedOutput,
        calls: list[CallReport],
        resolved: list[tuple[str, str, dict[str, Any]] | None],
        outcomes: list[ToolResult | None],
        states: list[StateReport],
        results: list[Any],
        opts: ScoreOptions,
        oracle: bool,
    ) -> TurnScore:
        required: list[TruthCall] = truth.required
        want = self._wanted(truth)
        by_name: dict[tuple[str, str], list[tuple[int, dict[str, Any]]]] = defaultdict(list)
        for j, r in enumerate(resolved):
            if r is not None:
                by_name[(r[0], r[1])].append((j, self._normalize(*r)))
        edges = [
            [
                j
                for j, args in by_name.get((c.env, c.tool), ())
                if args == expected or arguments_match(expected, args, c.masked, opts.rel_tol, opts.abs_tol)
            ]
            for c, expected in zip(required, want, strict=True)
        ]
        assignment = max_matching(len(calls), edges, opts.ordered)
        for j in assignment:
            if j >= 0:
                calls[j].matched = True
        matched = sum(1 for j in assignment if j >= 0)
        r_traj = matched / len(want) if want else 1.0
        r_state = sum(s.score for s in states) / len(states) if states else 1.0
        read_only = truth.read_only
        obtained = 0
        r_response = r_answer = 1.0
        missing: list[Fact] = []
        if read_only and required:
            obtained = sum(
                1 for c, expected in zip(required, results, strict=True) if _obtained(c, expected, outcomes)
            )
            r_response = obtained / len(required)
        found = [r for c, r in zip(required, results, strict=False) if not c.is_error]
        facts = unit_facts(truth.facts, found, read_only and bool(found))
        if facts and opts.check_answer:
            text = with_facts(parsed.text, facts) if oracle else parsed.text  # the oracle states its facts
            missing = missing_facts(facts, text)
            r_answer = 1 - len(missing) / len(facts)
        counted = sum(1 for c in calls if c.status != "injected_error")
        oracle_calls = len(truth.calls)  # the oracle's own failed attempts are not "too long"
        p_length = min(1.0, max(0, counted - oracle_calls) / max(1, oracle_calls))
        p_format = len(parsed.malformed) / parsed.attempts if parsed.attempts else 0.0
        gate = self._gate(truth, parsed, calls)
        outcome = r_state * r_response * r_answer
        alpha = opts.alpha if required else 0.0  # nothing to match: the outcome (state and answer) is all
        raw = alpha * r_traj + (1 - alpha) * outcome - opts.gamma * p_length - opts.beta * p_format
        by_status: dict[str, int] = defaultdict(int)
        for c in calls:
            by_status[c.status] += 1
        return TurnScore(
            id=truth.id,
            reward=0.0 if gate else _round(max(0.0, raw)),
            r_traj=_round(r_traj),
            r_state=_round(r_state),
            r_response=_round(r_response),
            r_answer=_round(r_answer),
            p_length=_round(p_length),
            p_format=_round(p_format),
            read_only=read_only,
            gate=gate,
            expected_calls=len(want),
            predicted_calls=len(calls),
            matched_calls=matched,
            obtained_results=obtained,
            malformed=len(parsed.malformed),
            unknown_tools=by_status["unknown_tool"],
            bad_arguments=by_status["bad_arguments"],
            tool_errors=by_status["tool_error"],
            injected_errors=by_status["injected_error"],
            distractor_calls=by_status["distractor"],
            forbidden_calls=sum(1 for c in calls if c.forbidden),
            states=states,
            calls=calls,
            missing=[f"{c.env}.{c.tool}" for c, j in zip(required, assignment, strict=True) if j < 0],
            missing_facts=missing,
            problems=[m.reason for m in parsed.malformed],
        )

    @staticmethod
    def _gate(truth: GroundTruth, parsed: ParsedOutput, calls: list[CallReport]) -> Gate | None:
        """Why the unit scores 0 whatever else it did, if it does."""
        if truth.required and not parsed.calls:
            return "no_calls"
        if any(c.forbidden for c in calls):
            return "forbidden_tool"
        if truth.read_only:
            used = {(c.env, c.tool) for c in truth.calls}
            if any(c.write and (c.env, c.tool) not in used for c in calls):
                return "write_in_read_only_turn"
        if not truth.required and not parsed.calls and not parsed.text.strip():
            return "no_answer"
        return None


def _denoised(result: ToolResult, noise: list[str]) -> ToolResult:
    from envreg.reward.match import without_fields

    if result.rendered is not None and isinstance(result.value, str):
        return result  # rendered text: compared by its scalars, noise or not
    return ToolResult(value=without_fields(result.value, noise))


def _obtained(call: TruthCall, expected: Any, outcomes: list[ToolResult | None]) -> bool:
    """Whether some replayed call answered what the oracle's `call` answered (its error, for a failed one)."""
    if call.is_error:
        return any(o is not None and o.is_error and o.text == expected for o in outcomes)
    return any(
        o is not None and not o.is_error and result_obtained(expected, o.value, o.rendered) for o in outcomes
    )


def _breakdown(truth: GroundTruth, scores: list[TurnScore]) -> RewardBreakdown:
    """One unit: its score; several: the means of the rewards and components, the sums of the counts."""
    if len(scores) == 1:
        return RewardBreakdown(**dict(scores[0]), turns=scores)
    n = len(scores)
    fields: dict[str, Any] = {k: _round(sum(getattr(s, k) for s in scores) / n) for k in MEANS}
    fields |= {k: sum(getattr(s, k) for s in scores) for k in SUMS}
    return RewardBreakdown.model_validate(
        {
            **fields,
            "id": truth.id,
            "read_only": all(s.read_only for s in scores),
            "states": scores[-1].states,
            "calls": [c for s in scores for c in s.calls],
            "missing": [f"turn {k}: {m}" for k, s in enumerate(scores) for m in s.missing],
            "missing_facts": [f for s in scores for f in s.missing_facts],
            "problems": [p for s in scores for p in s.problems],
            "turns": scores,
        }
    )


MEANS = ("reward", "r_traj", "r_state", "r_response", "r_answer", "p_length", "p_format")
SUMS = (
    "expected_calls", "predicted_calls", "matched_calls", "obtained_results", "malformed", "unknown_tools",
    "bad_arguments", "tool_errors", "injected_errors", "distractor_calls", "forbidden_calls",
)  # fmt: skip


def _round(x: float) -> float:
    """Float noise around the round values (1 - 1e-17) would read as a wrong answer: snap it."""
    return round(x) if math.isclose(x, round(x), abs_tol=1e-12) else x


async def score_one(
    truth: Any, output: Any, *, isolation: str = "local", options: ScoreOptions | None = None
) -> RewardBreakdown:
    """Score one prediction in a runtime of its own (convenient, not fast: reuse a `Scorer` for batches)."""
    async with Runtime() as rt:
        scorer = Scorer(rt, isolation=isolation, options=options)
        try:
            return await scorer.score(truth, output)
        finally:
            await scorer.close()


__all__ = [
    "Augmentation",
    "CallReport",
    "Gate",
    "RewardBreakdown",
    "ScoreOptions",
    "Scorer",
    "StateReport",
    "TurnScore",
    "score_one",
]
