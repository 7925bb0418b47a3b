"""An environment's validation scenarios as trajectory records, executed on the local tier.

Each step of a scenario becomes one turn (its query said as a plain request, its state after it, the
facts a read-only step's answer states), so a scenario can be augmented, exported and scored like a
synthesized trajectory. The calls' results and the states are what the environment answered.
"""

from __future__ import annotations

from typing import Any

from envreg.env import load_environment, load_scenarios, states_equal
from envreg.manifest import build_manifest
from envreg.reward.answer import answer_facts, render_facts
from envreg.synth.params import input_params
from envreg.synth.query import describe_request
from envreg.synth.records import EnvRef, ExecutedCall, Trajectory, Turn


def scenario_records(env_name: str, seed: int = 0) -> list[Trajectory]:
    """Every scenario of `env_name` (a catalog name or an environment folder) as a record."""
    environment = load_environment(env_name)
    scenarios, _ = load_scenarios(environment.folder)
    return [scenario_record(env_name, s.name, seed) for s in scenarios]


def scenario_record(env_name: str, scenario_name: str, seed: int = 0) -> Trajectory:
    """One scenario of `env_name` as a record with a turn per step. Raises `LookupError` for a name
    the environment's scenarios do not have."""
    environment = load_environment(env_name)
    scenarios, _ = load_scenarios(environment.folder)
    scenario = next((s for s in scenarios if s.name == scenario_name), None)
    if scenario is None:
        names = ", ".join(s.name for s in scenarios) or "none"
        raise LookupError(f"{environment.name} has no scenario {scenario_name!r} (it has: {names})")
    manifest = build_manifest(environment)
    tools = {t["name"]: t for t in (spec.model_dump(mode="json", by_alias=True) for spec in manifest.tools)}
    name = environment.name
    initial = scenario.initial_state or environment.initial_state().to_json()
    instance = environment.instance(initial)
    turns = []
    for step in scenario.steps:
        before = instance.state.to_json()
        result = instance.call_tool(step.tool, step.arguments)
        call = ExecutedCall(
            env=name,
            tool=step.tool,
            arguments=step.arguments,
            result=result.error if result.is_error else result.value,
            is_error=result.is_error,
        )
        after = instance.state.to_json()
        read_only = states_equal(before, after, environment.volatile)
        facts = answer_facts([call.result]) if read_only and not call.is_error else []
        turns.append(
            Turn(
                query="Please " + _request(tools[step.tool], step.arguments) + ".",
                calls=[call],
                state_sha256={name: instance.state.sha256()},
                states={name: after},
                answer=f"Done. {render_facts(facts)}".strip(),
                facts=facts,
            )
        )
    return Trajectory(
        id=f"scn_{name}_{scenario.name}",
        seed=seed,
        query_source="template",
        envs=[EnvRef(name=name, version=environment.version, manifest_digest=manifest.digest)],
        initial_states={name: initial},
        initial_state_sha256={name: environment.parse_state(initial).sha256()},
        turns=turns,
        final_states={name: instance.state.to_json()},
        final_state_sha256={name: instance.state.sha256()},
        volatile={name: list(environment.volatile)} if environment.volatile else {},
        meta={"scenario": scenario.name, "description": scenario.description},
    )


def _request(tool: dict[str, Any], arguments: dict[str, Any]) -> str:
    inputs = [
        {"path": list(p.path), "name": p.name, "user_providable": p.user_providable}
        for p in input_params("", tool)
    ]
    return describe_request(tool["name"], tool.get("description", ""), inputs, arguments)
