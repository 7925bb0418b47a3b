"""Budget checks: start-up time and per-call latency within the manifest's `runtime.budgets` (defaults otherwise)."""

from __future__ import annotations

import math
from collections import defaultdict

from envreg.validate.context import Context
from envreg.validate.core import Outcome, check, skipped, verdict


def percentile(values: list[float], q: float) -> float:
    """The `q` quantile (0..1) of `values` by the nearest-rank method (0.0 for no values)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def _source(declared: bool) -> str:
    return "declared in the manifest" if declared else "default"


@check("budgets.startup", "From starting a container to its first answered MCP request, within the budget.")
async def startup(ctx: Context) -> Outcome:
    await ctx.main()
    budgets, declared = ctx.budgets
    ms = ctx.startup_ms or 0.0
    problems = []
    if ms > budgets.startup_ms:
        problems.append(f"start-up took {ms:,.0f} ms, over the budget of {budgets.startup_ms:,} ms")
    evidence = [
        f"container 1: {ms:,.0f} ms to the first answered tools/list (budget {budgets.startup_ms:,} ms, {_source(declared)})"
    ]
    return verdict(problems, f"started in {ms:,.0f} ms", "start-up over budget", evidence)


def latency_problems(per_tool: dict[str, list[float]], limit_ms: int) -> tuple[list[str], list[str]]:
    """(problems, evidence) for per-call latencies in ms grouped by tool, against a p95 budget."""
    every = [ms for values in per_tool.values() for ms in values]
    p50, p95 = percentile(every, 0.5), percentile(every, 0.95)
    evidence = [f"{len(every)} calls: p50 {p50:.1f} ms, p95 {p95:.1f} ms, max {max(every, default=0):.1f} ms"]
    slowest = sorted(per_tool.items(), key=lambda kv: -percentile(kv[1], 0.95))
    evidence += [f"{tool}: p95 {percentile(v, 0.95):.1f} ms over {len(v)} calls" for tool, v in slowest[:3]]
    problems = []
    if p95 > limit_ms:
        over = [
            f"{t} (p95 {percentile(v, 0.95):.0f} ms)" for t, v in slowest if percentile(v, 0.95) > limit_ms
        ]
        problems.append(
            f"p95 latency {p95:.0f} ms is over the budget of {limit_ms:,} ms; slowest: {', '.join(over[:5])}"
        )
    return problems, evidence


@check(
    "budgets.latency",
    "The 95th percentile of the scenarios' call latencies is within the budget (each call's best of its two "
    "plays, on container 1 and on container 2).",
)
async def latency(ctx: Context) -> Outcome:
    runs, replays = await ctx.runs(), await ctx.replays()
    per_tool: dict[str, list[float]] = defaultdict(list)
    for index, run in enumerate(runs.scenarios):
        again = replays[index].steps if index < len(replays) else []
        for n, step in enumerate(run.steps):
            # a stall of the host in one play is not the environment's latency; a call slow in both is
            same = n < len(again) and again[n].tool == step.tool
            per_tool[step.tool].append(min(step.ms, again[n].ms) if same else step.ms)
    if not per_tool:
        return skipped("no calls in the scenarios")
    budgets, declared = ctx.budgets
    problems, evidence = latency_problems(per_tool, budgets.call_ms)
    evidence.insert(
        0,
        f"budget: p95 within {budgets.call_ms:,} ms ({_source(declared)}), host to container, best of two plays",
    )
    return verdict(problems, evidence[1].split(":", 1)[1].strip(), "calls over budget", evidence)
