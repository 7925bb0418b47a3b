"""Every reference environment's validation scenarios pass on an in-process instance."""

from __future__ import annotations

import pytest
from conftest import REFERENCE_ENVS
from pydantic import ValidationError

from envreg.env import load_environment, load_scenarios, states_equal
from envreg.env.scenario import CallOutcome, run_steps


def cases(kind: str) -> list:
    out = []
    for name in REFERENCE_ENVS:
        env = load_environment(name)
        scenarios, rejected = load_scenarios(env.folder)
        out += [
            pytest.param(env, s, id=f"{name}-{s.name}") for s in (scenarios if kind == "ok" else rejected)
        ]
    return out


@pytest.mark.parametrize("name", REFERENCE_ENVS)
def test_reference_environment_shape(name: str) -> None:
    env = load_environment(name)
    scenarios, rejected = load_scenarios(env.folder)
    assert len(env.tools) >= 8
    assert len(scenarios) >= 4
    assert len(rejected) >= 2
    called = {step.tool for s in scenarios for step in s.steps}
    assert called == set(env.tools), f"tools never exercised by a scenario: {set(env.tools) - called}"


@pytest.mark.anyio
@pytest.mark.parametrize(("env", "scenario"), cases("ok"))
async def test_scenario_passes_locally(env, scenario) -> None:
    instance = env.instance(scenario.initial_state)

    async def call(tool: str, arguments: dict) -> CallOutcome:
        result = instance.call_tool(tool, arguments)
        return CallOutcome(is_error=result.is_error, text=result.text)

    assert await run_steps(scenario, call) == []
    if scenario.final_state is not None:
        assert states_equal(instance.state.to_json(), scenario.final_state, env.volatile), (
            instance.state.canonical()
        )


@pytest.mark.parametrize(("env", "rejected"), cases("rejected"))
def test_rejected_state_is_refused(env, rejected) -> None:
    with pytest.raises(ValidationError) as info:
        env.parse_state(rejected.state)
    assert rejected.error in str(info.value)
