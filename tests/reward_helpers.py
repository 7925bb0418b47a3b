"""Ground truths for reward tests, executed from the catalog's validation scenarios (never written by hand)."""

from __future__ import annotations

import json
from typing import Any

from envreg.env import load_environment, load_scenarios, states_equal
from envreg.manifest import build_manifest
from envreg.reward.answer import answer_facts, render_facts
from envreg.synth.records import Call, EnvRef, ExecutedCall, Trajectory, Turn


def scenario_truth(env_name: str, scenario_name: str | None = None, results: bool = True) -> dict[str, Any]:
    """A ground truth whose calls, results and final state come from executing a scenario locally;
    a read-only one carries the oracle's answer (its facts). `results=False`: without the calls'
    results, as records made before they were kept."""
    env = load_environment(env_name)
    scenarios, _ = load_scenarios(env.folder)
    scenario = next(s for s in scenarios if scenario_name in (None, s.name))
    initial = scenario.initial_state or env.initial_state().to_json()
    instance = env.instance(initial)
    calls = []
    for step in scenario.steps:
        result = instance.call_tool(step.tool, step.arguments)
        call = {"env": env.name, "tool": step.tool, "arguments": step.arguments, "is_error": result.is_error}
        calls.append({**call, "result": result.text if result.is_error else result.value})
    final = instance.state.to_json()
    read_only = states_equal(initial, final, env.volatile)
    answer = (
        render_facts(answer_facts([c["result"] for c in calls if not c["is_error"]])) if read_only else ""
    )
    return {
        "id": f"{env.name}/{scenario.name}",
        "envs": [env.name],
        "calls": calls if results else [{k: v for k, v in c.items() if k != "result"} for c in calls],
        "initial_states": {env.name: initial},
        "final_states": {env.name: final},
        "volatile": {env.name: list(env.volatile)},
        "answer": answer,
    }


def executed_trajectory(env_name: str, scenario_name: str | None = None, seed: int = 0) -> Trajectory:
    """A `Trajectory` record executed from a scenario on the local tier (what synth would export)."""
    env = load_environment(env_name)
    truth = scenario_truth(env_name, scenario_name)
    instance = env.instance(truth["initial_states"][env.name])
    executed = []
    for call in truth["calls"]:
        result = instance.call_tool(call["tool"], call["arguments"])
        executed.append(
            ExecutedCall(
                env=env.name,
                tool=call["tool"],
                arguments=call["arguments"],
                result=result.error if result.is_error else result.value,
                is_error=result.is_error,
            )
        )
    initial_sha = env.parse_state(truth["initial_states"][env.name]).sha256()
    return Trajectory(
        id=f"traj_{env.name}_{seed}",
        seed=seed,
        query_source="template",
        envs=[EnvRef(name=env.name, version=env.version, manifest_digest=build_manifest(env).digest)],
        initial_states=truth["initial_states"],
        initial_state_sha256={env.name: initial_sha},
        turns=[
            Turn(
                query=f"Scenario {truth['id']}",
                calls=executed,
                state_sha256={env.name: instance.state.sha256()},
                states={env.name: instance.state.to_json()},
            )
        ],
        final_states={env.name: instance.state.to_json()},
        final_state_sha256={env.name: instance.state.sha256()},
        volatile={env.name: list(env.volatile)},
    )


def stepwise_trajectory(env_name: str, scenario_name: str, seed: int = 0) -> Trajectory:
    """A scenario executed on the local tier as a record with one turn per step (each turn's state,
    results and facts kept), as synthesis records them: its RL export has one row per step."""
    from envreg.synth.scenarios import scenario_record

    return scenario_record(env_name, scenario_name, seed)


def as_tool_call_tags(calls: list[dict[str, Any]], qualify: str = "", answer: str = "") -> str:
    """Model text in the Hermes / Qwen style: one ``<tool_call>`` tag per call, then `answer`; names
    qualified with their environment and `qualify` as separator (``.``, or ``__`` as the RL export names them)."""
    parts = ["I will do that now."]
    for c in calls:
        name = f"{c['env']}{qualify}{c['tool']}" if qualify else c["tool"]
        parts.append(f"<tool_call>\n{json.dumps({'name': name, 'arguments': c['arguments']})}\n</tool_call>")
    return "\n".join([*parts, answer])


def as_openai_messages(calls: list[dict[str, Any]], answer: str = "") -> list[dict[str, Any]]:
    """An OpenAI chat transcript: assistant messages with ``tool_calls`` and their tool answers, then
    the assistant's `answer` (when given)."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "please"}]
    for i, c in enumerate(calls):
        call_id = f"call_{i}"
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": c["tool"], "arguments": json.dumps(c["arguments"])},
                    }
                ],
            }
        )
        messages.append({"role": "tool", "tool_call_id": call_id, "content": "..."})
    if answer:
        messages.append({"role": "assistant", "content": answer})
    return messages


__all__ = [
    "Call",
    "as_openai_messages",
    "as_tool_call_tags",
    "executed_trajectory",
    "scenario_truth",
    "stepwise_trajectory",
]
