"""In-process conformance checks of an adapted environment, run by `envreg import envfactory`.

The same properties `envreg validate` checks on a running image, on an in-process instance, so an
importer learns at once what a foreign class breaks: scenarios pass, states survive dump -> load ->
dump, replaying a scenario twice gives the same state (no uuid4, wall clock or unseeded randomness),
a call that fails leaves the state alone, and no call reaches the network.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from envreg.canonical import canonical_json
from envreg.env import Environment, Scenario, states_equal
from envreg.env.scenario import strip_volatile


@dataclass(frozen=True)
class Check:
    name: str
    passed: bool | None  # None: could not be checked (skipped)
    evidence: str


def first_difference(a: Any, b: Any, where: str = "") -> str:
    """The JSON Pointer of the first place two JSON values differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            if key not in a or key not in b:
                return f"{where}/{key}"
            if canonical_json(a[key]) != canonical_json(b[key]):
                return first_difference(a[key], b[key], f"{where}/{key}")
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            if canonical_json(x) != canonical_json(y):
                return first_difference(x, y, f"{where}/{i}")
    return where or "/"


def _run(
    env: Environment, scenario: Scenario
) -> tuple[list[tuple[bool, str]], list[dict[str, Any]], list[str]]:
    """Results, the state after each call, and the failing calls that changed the state."""
    instance = env.instance(scenario.initial_state)
    results, states, dirty = [], [], []
    for step in scenario.steps:
        before = instance.state.canonical(cached=False)
        result = instance.call_tool(step.tool, step.arguments)
        results.append((result.is_error, result.text))
        if result.is_error and instance.state.canonical(cached=False) != before:
            dirty.append(step.tool)
        states.append(instance.state.to_json())
    return results, states, dirty


def check_environment(env: Environment, scenarios: list[Scenario]) -> list[Check]:
    """Every check, each with its evidence (what was compared, or the first difference found)."""
    checks: list[Check] = []
    if not scenarios:
        seed = env.initial_state().to_json()
        reloaded = env.parse_state(seed).to_json()
        same = canonical_json(seed) == canonical_json(reloaded)
        checks.append(
            Check(
                "state round-trip",
                same,
                "the seed state survives dump -> load -> dump"
                if same
                else f"the seed state changes on load at {first_difference(seed, reloaded)}",
            )
        )
        checks.append(
            Check("scenarios", None, "none given: pass --scenarios to check calls, determinism, network")
        )
        return checks

    failures, round_trip, determinism, dirty, network = [], [], [], [], []
    for scenario in scenarios:
        from envreg.env.scenario import CallOutcome, run_steps

        instance = env.instance(scenario.initial_state)

        async def call(tool: str, arguments: dict[str, Any], instance: Any = instance) -> CallOutcome:
            result = instance.call_tool(tool, arguments)
            return CallOutcome(result.is_error, result.text)

        import anyio

        problems = anyio.run(run_steps, scenario, call)
        if scenario.final_state is not None and not states_equal(
            instance.state.to_json(), scenario.final_state, env.volatile
        ):
            where = first_difference(
                strip_volatile(instance.state.to_json(), env.volatile),
                strip_volatile(scenario.final_state, env.volatile),
            )
            problems.append(f"final state differs at {where}")
        failures += [f"{scenario.name}: {p}" for p in problems]

        first, states, changed = _run(env, scenario)
        second, states_again, _ = _run(env, scenario)
        dirty += [f"{scenario.name}: {tool}" for tool in changed]
        network += [
            f"{scenario.name}: {text}"
            for is_error, text in first
            if is_error and "network call blocked" in text
        ]
        if first != second:
            i = next(i for i, (a, b) in enumerate(zip(first, second, strict=True)) if a != b)
            determinism.append(
                f"{scenario.name}: call {i + 1} ({scenario.steps[i].tool}) answered differently"
            )
        elif states and canonical_json(states[-1]) != canonical_json(states_again[-1]):
            where = first_difference(states[-1], states_again[-1])
            determinism.append(f"{scenario.name}: two replays end in different states at {where}")
        for i, state in enumerate(states):
            dumped = json.loads(canonical_json(state))
            again = env.parse_state(dumped).to_json()
            if canonical_json(again) != canonical_json(dumped):
                round_trip.append(
                    f"{scenario.name}: the state after call {i + 1} ({scenario.steps[i].tool}) changes on "
                    f"dump -> load -> dump at {first_difference(dumped, again)}"
                )
                break

    calls = sum(len(s.steps) for s in scenarios)
    checks.append(
        Check(
            "scenarios", not failures, "; ".join(failures[:3]) or f"{len(scenarios)} scenarios, {calls} calls"
        )
    )
    checks.append(
        Check(
            "state round-trip",
            not round_trip,
            "; ".join(round_trip[:3]) or "every state survives dump -> load -> dump",
        )
    )
    checks.append(
        Check(
            "deterministic",
            not determinism,
            "; ".join(determinism[:3]) or "each scenario replayed twice gives the same results and state",
        )
    )
    checks.append(
        Check(
            "transactional",
            not dirty,
            ("a failing call changed the state: " + ", ".join(dirty[:3]))
            if dirty
            else "failing calls leave the state unchanged",
        )
    )
    checks.append(
        Check("no network", not network, "; ".join(network[:2]) or "no call reached for the network")
    )
    return checks
