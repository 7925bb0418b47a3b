"""State checks: dumps load back, snapshots restore exactly, replays are deterministic, failing calls change
nothing and read-only tools write nothing."""

from __future__ import annotations

from typing import Any

from envreg.canonical import canonical_json
from envreg.env.scenario import strip_volatile
from envreg.errors import InvalidState, TooLarge
from envreg.validate.context import Context
from envreg.validate.core import Outcome, check, skipped, verdict
from envreg.validate.jsondiff import describe
from envreg.validate.runs import ScenarioRun, StepRecord, canonical_text, continue_from, play, state_hash


@check(
    "state.roundtrip", "dump -> load -> dump gives identical bytes, for the seed and every scenario state."
)
async def roundtrip(ctx: Context) -> Outcome:
    runs = await ctx.runs()
    sandbox = await ctx.main()
    states: list[tuple[str, dict[str, Any] | None]] = [("seed", None)]
    for run in runs.scenarios:
        if run.refused is None:
            states.append((f"scenario {run.name}, initial", run.initial))
            for step in run.steps:
                if step.changed:
                    states.append((f"{run.where(step)}, after", step.after))
    problems = []
    checked = 0
    async with ctx.main_lock:
        for label, state in states:
            if state is None:
                await sandbox.reset()
            else:
                try:
                    await sandbox.load_state(state)
                except (InvalidState, TooLarge) as exc:
                    problems.append(f"state {label}: the environment's own dump does not load back: {exc}")
                    continue
            dump = await sandbox.state()
            try:
                await sandbox.load_state(dump)
            except (InvalidState, TooLarge) as exc:
                problems.append(f"state {label}: its dump does not load back: {exc}")
                continue
            again = await sandbox.state()
            checked += 1
            if canonical_json(again) != canonical_json(dump):
                problems.append(
                    f"state {label}: dump -> load -> dump changes it: {describe(dump, again, ('dump', 'reloaded'))}"
                )
    evidence = [
        f"{checked}/{len(states)} distinct states round-tripped (the seed, initial states, states after writing calls)"
    ]
    return verdict(problems, "every state round-trips byte for byte", "states do not round-trip", evidence)


def _same_step(
    a: StepRecord, b: StepRecord, volatile: list[str], labels: tuple[str, str] = ("first", "second")
) -> str | None:
    """How two recordings of the same step differ (result first, then state), or None."""
    if canonical_json(_result(a)) != canonical_json(_result(b)):  # JSON objects: key order is not meaning
        return f"the result differs: {describe(_result(a), _result(b), labels)}"
    if canonical_text(a.after, volatile) != canonical_text(b.after, volatile):
        left, right = strip_volatile(a.after, volatile), strip_volatile(b.after, volatile)
        return f"the state differs: {describe(left, right, labels)}"
    return None


def _result(step: StepRecord) -> Any:
    if step.result.is_error:
        return {"error": step.result.text}
    return step.result.value


@check("state.snapshot_restore", "snapshot -> restore -> the next calls equal the uninterrupted run.")
async def snapshot_restore(ctx: Context) -> Outcome:
    runs = await ctx.runs()
    sandbox = await ctx.main()
    found: dict[str, str] = {}  # scenario -> what went wrong
    tried = []
    for run in runs.scenarios:
        n = len(run.steps)
        if run.refused is not None or n < 2:
            continue
        k = n // 2
        async with ctx.main_lock:
            await play(sandbox, run.scenario, slice(0, k))
            snap = await sandbox.snapshot()
            uninterrupted = await continue_from(sandbox, run.scenario, k)
            await sandbox.restore(snap)
            restored_state = await sandbox.state()
            restored = await continue_from(sandbox, run.scenario, k)
        tried.append(run.name)
        if state_hash(restored_state) != state_hash(snap.state):
            found[run.name] = (
                f"scenario {run.name}: the state after restoring the snapshot taken after step {k} is not the "
                f"snapshot's: {describe(snap.state, restored_state, ('snapshot', 'restored'))}"
            )
            continue
        for original, again in zip(uninterrupted, restored, strict=True):
            if (why := _same_step(original, again, ctx.volatile, ("uninterrupted", "restored"))) is not None:
                found[run.name] = (
                    f"{run.where(again)}, after restoring the snapshot taken after step {k}: {why}"
                )
                break
    # judged once the replays are in: a scenario that does not replay identically cannot tell a bad restore
    # from its own randomness (state.determinism reports it)
    replays = await ctx.replays()
    erratic = {
        a.name for a, b in zip(runs.scenarios, replays, strict=True) if _first_divergence(a, b, ctx.volatile)
    }
    judged = [name for name in tried if name not in erratic]
    problems = [found[name] for name in judged if name in found]
    evidence = [f"{len(judged)} scenarios: snapshot mid-way, run on, restore, run the same calls again"]
    if erratic & set(tried):
        evidence.append(
            f"not judged, as they do not replay identically (state.determinism): {', '.join(sorted(erratic & set(tried)))}"
        )
    if not judged:
        return skipped("no deterministic scenario with two or more calls", evidence[1:])
    return verdict(
        problems, "restored runs continue exactly like uninterrupted ones", "restore is not exact", evidence
    )


def _first_divergence(first: ScenarioRun, second: ScenarioRun, volatile: list[str]) -> str | None:
    if (first.refused is None) != (second.refused is None):
        return f"scenario {first.name}: the initial state was accepted once and refused once"
    for a, b in zip(first.steps, second.steps, strict=False):
        if (why := _same_step(a, b, volatile)) is not None:
            return f"{first.where(a)}: {why}"
    if len(first.steps) != len(second.steps):
        return (
            f"scenario {first.name}: {len(first.steps)} calls the first time, {len(second.steps)} the second"
        )
    return None


def _hash_divergence(first: ScenarioRun, second: ScenarioRun) -> str | None:
    """Where two runs' state hashes differ although their states agree outside volatile paths: the
    hash (and so a snapshot's id) covers volatile paths too, so replays must agree there as well."""
    for a, b in zip(first.steps, second.steps, strict=False):
        if state_hash(a.after) != state_hash(b.after):
            return (
                f"{first.where(a)}: the state hash differs in volatile paths "
                f"({describe(a.after, b.after, ('first', 'second'))}): state hashes and snapshot ids of "
                "replays differ; make what the tool stores there deterministic (a fixed or logical clock)"
            )
    return None


@check(
    "state.determinism",
    "Replaying each scenario in a fresh process, later, gives the same results and state hashes.",
)
async def determinism(ctx: Context) -> Outcome:
    runs, replays = await ctx.runs(), await ctx.replays()
    problems = [
        p
        for a, b in zip(runs.scenarios, replays, strict=True)
        if (p := _first_divergence(a, b, ctx.volatile) or _hash_divergence(a, b))
    ]
    calls = sum(len(r.steps) for r in replays)
    gap = min((b.started - a.ended for a, b in zip(runs.scenarios, replays, strict=True)), default=0.0)
    evidence = [
        f"{len(replays)} scenarios, {calls} calls replayed on container 2 (another process, hash seed and clock), "
        f"{gap:.1f}s or more after the first run",
        "a divergence means the tool reads something besides the state: uuid4, the wall clock, unseeded random, "
        "set or dict order",
    ]
    return verdict(problems, "replays are identical", "replays differ (not deterministic)", evidence)


@check("state.transactional", "A call that fails leaves the state hash unchanged.")
async def transactional(ctx: Context) -> Outcome:
    runs, replays = await ctx.runs(), await ctx.replays()
    problems, failing, reported = [], 0, set()
    for run in [*runs.scenarios, *replays]:
        for step in run.steps:
            if not step.result.is_error:
                continue
            failing += 1
            if step.changed and (run.name, step.index) not in reported:
                reported.add((run.name, step.index))
                problems.append(
                    f"{run.where(step)}: the call failed ({step.result.text[:120]}) but changed the state: "
                    f"{describe(step.before, step.after, ('before', 'after'))}"
                )
    if not failing:
        return skipped("no call fails in the scenarios: add steps with expect_error to check rollback")
    evidence = [f"{failing} failing calls, each with the state hashed before and after"]
    return verdict(problems, "failing calls change nothing", "failing calls change the state", evidence)


@check("state.read_only", "A tool annotated readOnlyHint never changes the state.")
async def read_only(ctx: Context) -> Outcome:
    runs = await ctx.runs()
    problems, calls = [], 0
    for run in runs.scenarios:
        for step in run.steps:
            if step.result.is_error or not ctx.read_only(step.tool):
                continue
            calls += 1
            if step.changed:
                problems.append(
                    f"{run.where(step)}: read-only tool {step.tool!r} changed the state: "
                    f"{describe(step.before, step.after, ('before', 'after'))}"
                )
    if not calls:
        return skipped("no successful call of a read-only tool in the scenarios")
    return verdict(
        problems, "read-only tools wrote nothing", "read-only tools write", [f"{calls} read-only calls"]
    )
