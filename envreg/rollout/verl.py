"""verl: `EnvregTool` for verl's multi-turn tool config and the ``envreg_agent`` agent loop.

One sandbox per trajectory, shared by every tool of that trajectory: ``create`` takes the trajectory's
task (``tools_kwargs["envreg"]["create_kwargs"]["task"]``, which `envreg synth`'s RL export fills),
``execute`` runs the call in the trajectory's sandbox (opened on its first call, in the task's
initial state), ``calc_reward`` is envreg's composite reward of the trajectory's calls, ``release``
closes the sandbox of a trajectory that ``create`` opened. verl 0.9's ``tool_agent`` loop creates and
releases a tool instance around every call; the trajectory is then the agent loop's request (its
``agent_data``), so state carries over from call to call, and the ``envreg_agent`` loop (``tool_agent``
plus the trajectory's reward as its ``reward_score`` and its sandboxes closed when it ends) is the
one to use::

    data:
      train_files: out/rl.parquet                     # envreg synth run ... --format rl
    actor_rollout_ref:
      rollout:
        multi_turn: {enable: true, format: hermes, tool_config_path: out/verl_tools.yaml}
        agent: {default_agent_loop: envreg_agent}

Rows name their loop in ``agent_name`` (``tool_agent`` as exported; ``envreg_agent`` needs this module
imported in the workers: ``agent.agent_loop_config_path`` with ``[{name: envreg_agent, _target_:
envreg.rollout.verl.EnvregAgentLoop}]``). The sandboxes live in one background runtime per worker
process (`envreg.rollout.background`).
"""

from __future__ import annotations

import contextvars
import secrets
from dataclasses import dataclass
from typing import Any
from uuid import uuid4

from verl.experimental.agent_loop.agent_loop import AgentLoopOutput, register
from verl.experimental.agent_loop.tool_agent_loop import ToolAgentLoop
from verl.tools.base_tool import BaseTool
from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse

from envreg.reward.verl import as_verl_result
from envreg.rollout.background import Background, shared
from envreg.rollout.session import Sessions, task_from_json
from envreg.rollout.task import Task
from envreg.rollout.verl_config import AGENT_NAME, TASK_KEY

_trajectory: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "envreg_verl_trajectory", default=None
)
_sessions: dict[str, Sessions] = {}


def sessions(isolation: str = "local") -> tuple[Background, Sessions]:
    """The worker's background runtime and its sessions for `isolation` (one of each per process)."""
    background = shared()
    if isolation not in _sessions:
        _sessions[isolation] = Sessions(background.runtime, isolation=isolation)
    return background, _sessions[isolation]


def task_of(tools_kwargs: dict[str, Any] | None) -> Task | None:
    text = ((tools_kwargs or {}).get(TASK_KEY) or {}).get("create_kwargs", {}).get("task")
    return task_from_json(text) if text else None


@dataclass
class _Instance:
    task: Task | None
    key: str | None = None


class EnvregTool(BaseTool):
    """One tool of an envreg environment; config ``{type: native, env: NAME, tool: NAME, isolation: local}``."""

    def __init__(self, config: dict[str, Any], tool_schema: OpenAIFunctionToolSchema) -> None:
        super().__init__(config, tool_schema)
        self.env = config["env"]
        self.tool = config["tool"]
        self.isolation = config.get("isolation", "local")
        self._instances: dict[str, _Instance] = {}

    async def create(self, instance_id: str | None = None, **kwargs: Any) -> tuple[str, ToolResponse]:
        """A tool instance for a trajectory; its task is ``create_kwargs["task"]`` (JSON text or `Task`)."""
        instance_id = instance_id or uuid4().hex
        task = (kwargs.get("create_kwargs") or {}).get("task") or kwargs.get("task")
        if isinstance(task, str):
            task = task_from_json(task)
        self._instances[instance_id] = _Instance(task)
        return instance_id, ToolResponse()

    def _key_and_task(self, instance_id: str, agent_data: Any) -> tuple[str, Task]:
        instance = self._instances.setdefault(instance_id, _Instance(None))
        key = _trajectory.get() or getattr(agent_data, "request_id", None) or instance_id
        task = instance.task or task_of(getattr(agent_data, "tools_kwargs", None))
        if task is None:
            raise ValueError(
                f"{self.name}: no envreg task for this trajectory; rows need extra_info.tools_kwargs."
                f"{TASK_KEY}.create_kwargs.task (envreg synth's RL export writes it)"
            )
        instance.key, instance.task = key, task
        return key, task

    async def execute(
        self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
    ) -> tuple[ToolResponse, float, dict]:
        """Run the call in the trajectory's sandbox; its result (or error) is the text the model reads."""
        try:
            key, task = self._key_and_task(instance_id, kwargs.get("agent_data"))
        except ValueError as exc:
            return ToolResponse(text=str(exc)), 0.0, {"status": "no_task"}
        background, pool = sessions(self.isolation)
        record = await background.run(pool.call, key, task, self.env, self.tool, parameters)
        return ToolResponse(text=record.result), 0.0, {"status": record.status}

    async def calc_reward(self, instance_id: str, **kwargs: Any) -> float:
        """envreg's composite reward of the calls the trajectory made so far."""
        instance = self._instances.get(instance_id)
        if instance is None or instance.task is None:
            return 0.0
        background, pool = sessions(self.isolation)
        breakdown = await background.run(pool.score, instance.key or instance_id, instance.task)
        return breakdown.reward

    async def release(self, instance_id: str, **kwargs: Any) -> None:
        """Forget the instance; close the trajectory's sandbox when this instance was the trajectory."""
        instance = self._instances.pop(instance_id, None)
        if instance is not None and instance.key in (None, instance_id):
            background, pool = sessions(self.isolation)
            await background.run(pool.close, instance_id)


@register(AGENT_NAME)
class EnvregAgentLoop(ToolAgentLoop):
    """verl's ``tool_agent`` loop on one envreg trajectory: its reward is envreg's composite reward of the
    calls it made (``reward_score``, components in ``extra_fields["envreg"]``), its sandboxes end with it."""

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        key = "traj_" + secrets.token_hex(8)
        token = _trajectory.set(key)
        tools: dict[str, Any] = getattr(self, "tools", {})  # set by ToolAgentLoop.__init__
        isolation = next((t.isolation for t in tools.values() if isinstance(t, EnvregTool)), "local")
        background, pool = sessions(isolation)
        try:
            output = await super().run(sampling_params, **kwargs)  # pyright: ignore[reportAbstractUsage]
            task = task_of(kwargs.get("tools_kwargs"))
            if task is not None:
                breakdown = await background.run(pool.score, key, task)
                output.reward_score = breakdown.reward
                output.extra_fields["envreg"] = as_verl_result(breakdown)
            return output
        finally:
            _trajectory.reset(token)
            await background.run(pool.close, key)
