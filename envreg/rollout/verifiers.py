"""verifiers (prime-intellect): `load_environment(...)` returns a verifiers environment on envreg sandboxes.

```python
import verifiers as vf

env = vf.load_environment("envreg.rollout.verifiers", envs=["bank"])          # or tasks="trajectories.jsonl"
client = vf.ClientConfig(api_base_url="http://127.0.0.1:8000/v1", api_key_var="OPENAI_API_KEY")
results = env.evaluate_sync(client, model="Qwen/Qwen3-8B", rollouts_per_example=4)
```

`EnvregToolEnv` is a ``vf.StatefulToolEnv``: each rollout gets its own sandboxes, started in its task's
initial state in ``setup_state`` and closed when it ends; the tools (one per tool of the task's
environments, the JSON schemas of their manifests) run in them, and every call is kept in the state.
The rubric is envreg's composite reward of the completion's tool calls against the task's oracle
(weight 1; calls verifiers could not parse count as malformed), with its components as metrics.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import verifiers as vf
from datasets import Dataset

from envreg.rollout.background import shared
from envreg.rollout.session import Sessions, openai_tool, task_from_json
from envreg.rollout.task import Task, read_tasks, scenario_tasks

_KEY, _CALLS, _TASK = "envreg_key", "envreg_calls", "envreg_task"
METRICS = ("r_traj", "r_state", "p_length", "p_format")


def tool_defs(task: Task, listings: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """verifiers' provider-agnostic tool definitions of a task (name, description, JSON schema)."""
    defs = []
    for env in task.envs:
        for tool in listings[env]:
            function = openai_tool(task.function_name(env, tool["name"]), tool)["function"]
            defs.append(
                {
                    "name": function["name"],
                    "description": function["description"],
                    "parameters": function["parameters"],
                }
            )
    return defs


def _listings(task: Task, sources: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    from envreg.env import load_environment
    from envreg.manifest import build_manifest

    listings = {}
    for env in task.envs:
        manifest = build_manifest(load_environment(sources.get(env, env)))
        listings[env] = [t.model_dump(by_alias=True, exclude_none=True) for t in manifest.tools]
    return listings


def completion_calls(completion: Any) -> list[dict[str, Any]]:
    """The tool calls of a verifiers completion as the reward reads them (arguments as written)."""
    calls = []
    for message in completion or []:
        role = message.get("role") if isinstance(message, dict) else getattr(message, "role", None)
        raw = message.get("tool_calls") if isinstance(message, dict) else getattr(message, "tool_calls", None)
        if role != "assistant":
            continue
        for call in raw or []:
            if isinstance(call, str):
                call = json.loads(call)
            if isinstance(call, dict):
                function = call.get("function") or call
                calls.append({"name": function.get("name"), "arguments": function.get("arguments")})
            else:
                calls.append({"name": call.name, "arguments": call.arguments})
    return calls


def completion_answer(completion: Any) -> str:
    """The completion's closing words: its last assistant message without tool calls."""
    for message in reversed(list(completion or [])):
        get = message.get if isinstance(message, dict) else lambda key, m=message: getattr(m, key, None)
        content = get("content")
        if get("role") == "assistant" and not get("tool_calls") and isinstance(content, str):
            return content
    return ""


class EnvregRubric(vf.Rubric):
    """envreg's composite reward of the calls a rollout ran (weight 1) and its components (metrics)."""

    def __init__(self, env: EnvregToolEnv, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.env = env
        self.add_reward_func(self.envreg_reward, weight=1.0)
        for name in METRICS:
            self.add_metric(self._component(name))

    async def envreg_reward(self, completion: vf.Messages, state: vf.State) -> float:
        """Score every tool call of the completion (those verifiers could not parse count as malformed)."""
        task = task_from_json(state["info"][_TASK])
        background, pool = self.env.pool()
        said = {"calls": completion_calls(completion), "answer": completion_answer(completion)}
        breakdown = await background.run(pool.scorer.score, task.truth(), said)
        state["envreg_reward"] = breakdown.model_dump(exclude={"calls"})
        return breakdown.reward

    def _component(self, name: str):
        async def metric(state: vf.State) -> float:
            return float((state.get("envreg_reward") or {}).get(name, 0.0))

        metric.__name__ = name
        return metric


class EnvregToolEnv(vf.StatefulToolEnv):
    """A verifiers environment whose examples are envreg tasks and whose tools run in envreg sandboxes."""

    def __init__(
        self,
        tasks: Sequence[Task],
        *,
        isolation: str = "local",
        sources: dict[str, Any] | None = None,
        max_turns: int = 32,
        **kwargs: Any,
    ) -> None:
        self.isolation = isolation
        self.sources = dict(sources or {})
        cached: dict[tuple[str, ...], dict[str, list[dict[str, Any]]]] = {}
        rows = []
        for task in tasks:
            key = tuple(task.envs)
            if key not in cached:
                cached[key] = _listings(task, self.sources)
            rows.append(
                {
                    "prompt": task.prompt(),
                    "answer": "",
                    "info": {
                        _TASK: task.model_dump_json(),
                        "tool_defs": tool_defs(task, cached[key]),
                        "id": task.id,
                    },
                }
            )
        super().__init__(tools=[], max_turns=max_turns, dataset=Dataset.from_list(rows), **kwargs)
        self.rubric = vf.RubricGroup([EnvregRubric(self), *([self.rubric] if self.rubric.funcs else [])])

    def pool(self) -> tuple[Any, Sessions]:
        background = shared()
        if not hasattr(self, "_sessions"):
            self._sessions = Sessions(background.runtime, isolation=self.isolation, sources=self.sources)
        return background, self._sessions

    async def setup_state(self, state: vf.State) -> vf.State:
        """The rollout's sandboxes, in its task's initial state."""
        task = task_from_json(state["info"][_TASK])
        background, pool = self.pool()
        state[_KEY] = f"vf_{state['trajectory_id']}"
        state[_CALLS] = []
        await background.run(pool.get, state[_KEY], task)
        return cast(vf.State, await super().setup_state(state))

    def update_tool_args(
        self, tool_name: str, tool_args: dict, messages: vf.Messages, state: vf.State, **kwargs: Any
    ) -> dict:
        """Carry the rollout's state to `call_tool` (the schemas the model sees do not show it)."""
        return {"__envreg_state__": state, "arguments": tool_args}

    async def call_tool(
        self, tool_name: str, tool_args: dict, tool_call_id: str, **kwargs: Any
    ) -> vf.ToolMessage:
        """Run the call in the rollout's sandbox; unknown tools and errors are answered, never raised."""
        state = tool_args["__envreg_state__"]
        background, pool = self.pool()
        session = pool.open[state[_KEY]]
        record = await background.run(session.call, tool_name, tool_args["arguments"], tool_call_id)
        state[_CALLS].append(record.model_dump(mode="json"))
        return vf.ToolMessage(role="tool", content=record.result, tool_call_id=tool_call_id)

    @vf.cleanup
    async def close_sandboxes(self, state: vf.State) -> None:
        if _KEY in state:
            background, pool = self.pool()
            await background.run(pool.close, state[_KEY])


def load_environment(
    envs: Sequence[str] | str | None = None,
    tasks: str | Path | Sequence[Task] | None = None,
    isolation: str = "local",
    max_turns: int = 32,
    sources: dict[str, Any] | None = None,
    **kwargs: Any,
) -> EnvregToolEnv:
    """The verifiers entry point: envreg tasks (`envs`' scenarios, a tasks / trajectories file, or `Task`s)
    as a ``vf.StatefulToolEnv`` on envreg sandboxes (`isolation`: local, instance or container)."""
    found: list[Task] = []
    if envs:
        found += scenario_tasks([envs] if isinstance(envs, str) else envs)
    if isinstance(tasks, str | Path):
        found += read_tasks(tasks)
    elif tasks:
        found += [
            t if isinstance(t, Task) else Task.model_validate(json.loads(t) if isinstance(t, str) else t)
            for t in tasks
        ]
    if not found:
        raise ValueError(
            "give envs=[...] (their scenarios) or tasks= (a file of tasks or records, or Task objects)"
        )
    return EnvregToolEnv(found, isolation=isolation, sources=sources, max_turns=max_turns, **kwargs)
