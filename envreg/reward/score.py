"""The composite reward: replay the predicted calls in sandboxes seeded from the record, compare with the oracle.

``R = max(0, a*R_traj + (1-a)*R_state - g*P_length - b*P_format)``

- `R_traj`: the share of the oracle's calls found in the prediction (one-to-one; masked arguments
  ignored; numbers within tolerance; arguments normalized by the tool's own model, so defaults and
  equivalent spellings match; in order with ``ordered``).
- `R_state`: per environment, the replayed final state against the oracle's (canonical JSON,
  volatile paths ignored), 1 or 0, or entity-level partial credit with ``partial_state``; averaged.
- `P_length`: calls beyond the oracle's count (its failed attempts included), relative to it (at
  most 1). A retry after an injected error is not counted.
- `P_format`: the share of call attempts that could not be read.

Unknown tools, bad arguments and malformed calls are counted in the breakdown, never raised.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any, Literal

from pydantic import BaseModel, Field

from envreg.env import Environment, EnvironmentNotFound, UnknownToolError, load_environment
from envreg.env.augment import Augmentation
from envreg.reward.match import arguments_match, entity_score, json_equal, max_matching
from envreg.reward.parse import ParsedOutput, PredictedCall, parse_output, split_qualified
from envreg.reward.truth import GroundTruth, TruthCall, read_truth
from envreg.runtime import Runtime, Sandbox

Status = Literal["ok", "tool_error", "bad_arguments", "unknown_tool", "injected_error", "distractor"]
BAD_ARGUMENTS = "Invalid arguments for tool"


class ScoreOptions(BaseModel):
    """Weights and matching rules."""

    alpha: float = Field(default=0.5, ge=0, le=1, description="Weight of R_traj; R_state gets 1 - alpha.")
    gamma: float = Field(default=0.1, ge=0, description="Weight of the length penalty.")
    beta: float = Field(default=0.1, ge=0, description="Weight of the format penalty.")
    ordered: bool = Field(default=False, description="Oracle calls must appear in their order.")
    partial_state: bool = Field(default=False, description="Entity-level partial credit for R_state.")
    rel_tol: float = Field(default=1e-6, ge=0, description="Relative tolerance for numbers.")
    abs_tol: float = Field(default=1e-9, ge=0, description="Absolute tolerance for numbers.")


class CallReport(BaseModel):
    env: str | None
    tool: str
    status: Status
    matched: bool = False


class StateReport(BaseModel):
    env: str
    equal: bool
    score: float
    differing: list[str] = Field(default_factory=list, description="Entities that differ (partial_state).")


class RewardBreakdown(BaseModel):
    """One scored prediction, component by component."""

    id: str = ""
    reward: float
    r_traj: float
    r_state: float
    p_length: float
    p_format: float
    expected_calls: int
    predicted_calls: int
    matched_calls: int
    malformed: int = 0
    unknown_tools: int = 0
    bad_arguments: int = 0
    tool_errors: int = 0
    injected_errors: int = 0
    distractor_calls: int = 0
    states: list[StateReport] = Field(default_factory=list)
    calls: list[CallReport] = Field(default_factory=list)
    missing: list[str] = Field(default_factory=list, description="Oracle calls not found, as env.tool.")
    problems: list[str] = Field(default_factory=list, description="Why each malformed call was unreadable.")


class Scorer:
    """Scores predictions against records on one isolation tier, reusing its sandboxes.

    ```python
    async with Runtime() as rt:
        scorer = Scorer(rt, isolation="local")
        breakdown = await scorer.score(record, model_output)
    ```
    """

    def __init__(
        self,
        runtime: Runtime,
        *,
        isolation: str = "local",
        options: ScoreOptions | None = None,
        sources: dict[str, str | Environment] | None = None,
    ) -> None:
        self.runtime = runtime
        self.isolation = isolation
        self.options = options or ScoreOptions()
        self.sources = dict(sources or {})  # environment name -> Environment, folder or image reference
        self._idle: dict[str, list[Sandbox]] = defaultdict(list)
        self._tools: dict[str, dict[str, dict[str, Any]]] = {}
        self._code: dict[str, Any] = {}

    async def score(
        self, truth: Any, output: Any, options: ScoreOptions | None = None, *, oracle: bool = False
    ) -> RewardBreakdown:
        """Score `output` (raw model output, see `parse_output`) against `truth` (a record, see `read_truth`).

        With ``oracle=True`` the record's own calls are the prediction (a check of the record).
        """
        truth = read_truth(truth)
        opts = options or self.options
        parsed = ParsedOutput(
            calls=[PredictedCall(c.tool, c.arguments, c.env) for c in truth.calls] if oracle else []
        )
        if not oracle:
            parsed = parse_output(output)
        sandboxes: dict[str, Sandbox] = {}
        try:
            for env in truth.envs:
                sandboxes[env] = await self._acquire(env, truth)
            calls, resolved = await self._replay(truth, parsed.calls, sandboxes)
            states = [await self._state_report(env, truth, sandboxes[env], opts) for env in truth.envs]
        finally:
            for env, sb in sandboxes.items():
                await self._release(env, sb)
        return self._combine(truth, parsed, calls, resolved, states, opts)

    # sandboxes ------------------------------------------------------------------------------------
    async def _acquire(self, env: str, truth: GroundTruth) -> Sandbox:
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
                self.sources.get(env, env),
                isolation=self.isolation,  # type: ignore[arg-type]
                state=truth.initial_states[env],
            )
        if env not in self._tools:
            self._tools[env] = {t["name"]: t for t in await sb.list_tools()}
        augmentation = truth.augmentation.get(env)
        if augmentation is not None:
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

    async def _replay(
        self, truth: GroundTruth, calls: list[PredictedCall], sandboxes: dict[str, Sandbox]
    ) -> tuple[list[CallReport], list[tuple[str, str, dict[str, Any]] | None]]:
        reports: list[CallReport] = []
        resolved: list[tuple[str, str, dict[str, Any]] | None] = []
        sent: dict[str, list[int]] = defaultdict(list)  # env -> indexes of the calls sent to it
        for call in calls:
            env, tool = self._resolve(call, truth)
            if env is None:
                reports.append(CallReport(env=call.env, tool=call.tool, status="unknown_tool"))
                resolved.append(None)
                continue
            try:
                result = await sandboxes[env].call_tool(tool, call.arguments)
            except UnknownToolError:
                reports.append(CallReport(env=env, tool=tool, status="unknown_tool"))
                resolved.append(None)
                continue
            status: Status = "ok"
            if result.is_error:
                status = "bad_arguments" if result.text.startswith(BAD_ARGUMENTS) else "tool_error"
            reports.append(CallReport(env=env, tool=tool, status=status))
            resolved.append((env, tool, call.arguments))
            sent[env].append(len(reports) - 1)
        for env, indexes in sent.items():
            if env not in truth.augmentation:
                continue
            labels = await sandboxes[env].augmentation_labels()
            for index, label in zip(indexes, labels, strict=False):
                kind = label.get("kind")
                if kind in ("injected_error", "distractor"):
                    reports[index].status = kind
                    resolved[index] = None
        return reports, resolved

    # states ---------------------------------------------------------------------------------------
    async def _state_report(
        self, env: str, truth: GroundTruth, sb: Sandbox, opts: ScoreOptions
    ) -> StateReport:
        volatile = truth.volatile.get(env, [])
        got = await sb.state()
        if not volatile and json_equal(got, truth.final_states[env]):
            return StateReport(env=env, equal=True, score=1.0)
        score, differing = entity_score(truth.initial_states[env], truth.final_states[env], got, volatile)
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
            source = self.sources.get(env, env)
            try:
                self._code[env] = source if isinstance(source, Environment) else load_environment(source)
            except (EnvironmentNotFound, OSError):
                self._code[env] = None
        environment = self._code[env]
        if environment is not None and tool in environment.tools:
            try:
                model = environment.tools[tool].arguments_model
                return model.model_validate(arguments).model_dump(mode="json")
            except Exception:  # invalid arguments: compare them as written
                return arguments
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
        states: list[StateReport],
        opts: ScoreOptions,
    ) -> RewardBreakdown:
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
        counted = sum(1 for c in calls if c.status != "injected_error")
        oracle_calls = len(truth.calls)  # the oracle's own failed attempts are not "too long"
        p_length = min(1.0, max(0, counted - oracle_calls) / max(1, oracle_calls))
        p_format = len(parsed.malformed) / parsed.attempts if parsed.attempts else 0.0
        raw = opts.alpha * r_traj + (1 - opts.alpha) * r_state - opts.gamma * p_length - opts.beta * p_format
        by_status = defaultdict(int)
        for c in calls:
            by_status[c.status] += 1
        return RewardBreakdown(
            id=truth.id,
            reward=_round(max(0.0, raw)),
            r_traj=_round(r_traj),
            r_state=_round(r_state),
            p_length=_round(p_length),
            p_format=_round(p_format),
            expected_calls=len(want),
            predicted_calls=len(calls),
            matched_calls=matched,
            malformed=len(parsed.malformed),
            unknown_tools=by_status["unknown_tool"],
            bad_arguments=by_status["bad_arguments"],
            tool_errors=by_status["tool_error"],
            injected_errors=by_status["injected_error"],
            distractor_calls=by_status["distractor"],
            states=states,
            calls=calls,
            missing=[f"{c.env}.{c.tool}" for c, j in zip(required, assignment, strict=True) if j < 0],
            problems=[m.reason for m in parsed.malformed],
        )


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
    "RewardBreakdown",
    "ScoreOptions",
    "Scorer",
    "StateReport",
    "score_one",
]
