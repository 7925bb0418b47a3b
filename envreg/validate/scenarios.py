"""Scenario checks: the image's own scenarios (``/env/scenarios``) played on a real container of it."""

from __future__ import annotations

from envreg.validate.context import Context
from envreg.validate.core import Outcome, check, failed, verdict


@check(
    "scenarios.initial_states",
    "Each scenario's initial state is accepted; each rejected state is refused as expected.",
)
async def initial_states(ctx: Context) -> Outcome:
    if ctx.scenarios_problem:
        return failed(ctx.scenarios_problem)
    if not ctx.scenarios:
        return failed("the image ships no scenarios (/env/scenarios/*.json): add some before publishing it")
    runs = await ctx.runs()
    problems = [f"scenario {r.name}: initial state refused: {r.refused}" for r in runs.scenarios if r.refused]
    problems += [p for r in runs.rejections if (p := r.problem)]
    evidence = [
        f"{sum(r.refused is None for r in runs.scenarios)}/{len(runs.scenarios)} initial states accepted",
        f"{sum(r.problem is None for r in runs.rejections)}/{len(runs.rejections)} rejected states refused "
        "with the expected error, the state kept",
    ]
    return verdict(
        problems, "initial states accepted, bad states refused", "state acceptance is wrong", evidence
    )


@check("scenarios.results", "Each call returns the expected result or error.")
async def results(ctx: Context) -> Outcome:
    if ctx.scenarios_problem or not ctx.scenarios:
        return failed(ctx.scenarios_problem or "the image ships no scenarios")
    runs = await ctx.runs()
    problems = [f"scenario {r.name}, {m}" for r in runs.scenarios for m in r.mismatches]
    calls = sum(len(r.steps) for r in runs.scenarios)
    errors = sum(s.result.is_error for r in runs.scenarios for s in r.steps)
    evidence = [f"{calls} calls in {len(runs.scenarios)} scenarios ({errors} of them errors)"]
    return verdict(problems, "every call gave the expected result", "calls gave unexpected results", evidence)


@check(
    "scenarios.final_states",
    "Each scenario's final state equals the expected one (canonical, volatile paths ignored).",
)
async def final_states(ctx: Context) -> Outcome:
    if ctx.scenarios_problem or not ctx.scenarios:
        return failed(ctx.scenarios_problem or "the image ships no scenarios")
    runs = await ctx.runs()
    problems = [p for r in runs.scenarios if r.refused is None and (p := r.final_problem(ctx.volatile))]
    stated = sum(
        r.scenario.final_state is not None or bool(r.scenario.final_state_sha256) for r in runs.scenarios
    )
    by_digest = sum(
        r.scenario.final_state is None and bool(r.scenario.final_state_sha256) for r in runs.scenarios
    )
    evidence = [
        f"{stated}/{len(runs.scenarios)} scenarios state their final state"
        + (f" ({by_digest} by its sha256)" if by_digest else "")
    ]
    if ctx.volatile:
        evidence.append(f"volatile paths ignored: {', '.join(ctx.volatile)}")
    if not stated:
        return failed(
            "no scenario states its final state (final_state or final_state_sha256): the final state is never checked",
            evidence,
        )
    return verdict(problems, "every final state is the expected one", "final states differ", evidence)
