"""verl as installed from PyPI: its own tool loader on the tool config envreg's RL export writes, the
create/execute/calc_reward/release lifecycle, verl's tool_agent call path (one sandbox per trajectory,
many trajectories at once) and the envreg_agent loop's reward."""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING

import pyarrow.parquet as pq
import pytest
from conftest import installed
from reward_helpers import executed_trajectory

from envreg.canonical import canonical_json, sha256_hex
from envreg.env import load_environment
from envreg.manifest import build_manifest
from envreg.rollout import Task
from envreg.rollout.verl_config import TASK_KEY
from envreg.synth.export import export

if TYPE_CHECKING:
    from verl.experimental.agent_loop.tool_agent_loop import AgentData, ToolAgentLoop

# verl is imported by the tests, not at collection: each xdist worker collects every module
pytestmark = pytest.mark.skipif(
    not installed("verl"), reason="verl is not installed: scripts/bootstrap --trainers installs it"
)

SCENARIOS = [
    ("bank", "pay_new_payee_chain"),
    ("calendar", "book_meeting_with_contact"),
    ("bank", "lost_card_replacement"),
]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    from verl.tools.tool_registry import initialize_tools_from_config

    records = [executed_trajectory(env, name, seed=i) for i, (env, name) in enumerate(SCENARIOS)]
    manifests = {e: build_manifest(load_environment(e)) for e in ("bank", "calendar")}
    written = export(records, tmp_path_factory.mktemp("rl"), manifests, formats=["rl"])
    rows = pq.read_table(written["rl"]).to_pylist()
    tools = {t.name: t for t in initialize_tools_from_config(str(written["verl_tools"]))}
    return rows, tools, manifests


def _run(coro):
    return asyncio.run(coro)


def _task(row) -> tuple[Task, str]:
    text = row["extra_info"]["tools_kwargs"][TASK_KEY]["create_kwargs"]["task"]
    return Task.model_validate_json(text), text


def test_verl_loads_every_tool_from_the_exported_config(exported) -> None:
    from envreg.rollout.verl import EnvregTool

    rows, tools, manifests = exported
    expected = {f"{env}__{spec.name}" for env, m in manifests.items() for spec in m.tools}
    assert set(tools) == expected and all(isinstance(t, EnvregTool) for t in tools.values())
    create = tools["calendar__create_event"].tool_schema.function
    spec = next(s for s in manifests["calendar"].tools if s.name == "create_event")
    assert create.description == spec.description
    assert set(create.parameters.properties) == set(spec.input_schema["properties"])
    assert create.parameters.required == spec.input_schema.get("required", [])
    for row in rows:
        info = row["extra_info"]
        assert row["agent_name"] == "tool_agent" and info["need_tools_kwargs"] is True
        assert set(info["tool_selection"]) <= set(tools) and info["tool_selection"]
        task, _ = _task(row)
        assert task.id == f"{info['trajectory_id']}#{info['turn']}"
        assert info["interaction_kwargs"] == {"name": TASK_KEY, "task_id": task.id}


def test_the_classic_lifecycle_create_execute_calc_reward_release(exported) -> None:
    from envreg.rollout.verl import sessions

    rows, tools, _ = exported
    task, text = _task(rows[0])

    async def lifecycle():
        trajectory = "req-1"  # verl gives every tool of a request the request's id
        for tool in tools.values():
            await tool.create(trajectory, create_kwargs={"task": text})
        for call in task.turns[0].calls:
            response, _, metrics = await tools[f"{call.env}__{call.tool}"].execute(trajectory, call.arguments)
            assert metrics["status"] in ("ok", "error") and response.text
        before = await tools["bank__list_accounts"].calc_reward(trajectory)
        background, pool = sessions()
        live = await background.run(pool.get, trajectory, task)
        state = await background.run(live.sandboxes["bank"].state)
        for tool in tools.values():
            await tool.release(trajectory)
        return before, state, trajectory in pool.open

    reward, state, still_open = _run(lifecycle())
    assert reward == 1.0 and still_open is False
    assert sha256_hex(canonical_json(state)) == sha256_hex(canonical_json(task.final_states["bank"]))


def _loop(tools) -> ToolAgentLoop:
    """verl's ToolAgentLoop with only what its tool-call path reads (no model, no tokenizer)."""
    from envreg.rollout.verl import EnvregAgentLoop

    loop = object.__new__(EnvregAgentLoop)
    loop.tools = tools
    loop.max_tool_response_length = 100_000
    loop.tool_response_truncate_side = "middle"
    return loop


def _agent_data(row) -> AgentData:
    from verl.experimental.agent_loop.tool_agent_loop import AgentData

    info = row["extra_info"]
    return AgentData(
        messages=list(row["prompt"]), image_data=None, video_data=None, audio_data=None, mm_processor_kwargs=None,
        metrics={}, request_id=f"req-{info['trajectory_id']}-{info['turn']}", tools_kwargs=info["tools_kwargs"],
    )  # fmt: skip


def test_tool_agent_calls_share_one_sandbox_per_trajectory_many_at_once(exported) -> None:
    from verl.experimental.agent_loop.tool_parser import FunctionCall

    from envreg.rollout.verl import sessions

    rows, tools, _ = exported
    loop = _loop(tools)
    copies = [(row, i) for i in range(8) for row in rows]

    async def trajectory(row, i):
        data = _agent_data(row)
        data.request_id += f"-{i}"
        task, _ = _task(row)
        texts = []
        for call in task.turns[0].calls:
            fc = FunctionCall(name=f"{call.env}__{call.tool}", arguments=json.dumps(call.arguments))
            response, _, _ = await loop._call_tool(fc, data.tools_kwargs, data)
            texts.append(response.text)
        background, pool = sessions()
        breakdown = await background.run(pool.score, data.request_id, task)
        session = pool.open[data.request_id]
        hashes = await background.run(session.state_sha256)
        await background.run(pool.close, data.request_id)
        return task, breakdown, hashes

    async def everything():
        return await asyncio.gather(*(trajectory(row, i) for row, i in copies))

    results = _run(everything())
    for task, breakdown, hashes in results:
        assert breakdown.reward == 1.0
        env = task.envs[0]
        assert hashes[env] == sha256_hex(canonical_json(task.final_states[env])), "no cross-talk"


def test_envreg_agent_loop_scores_the_trajectory_and_closes_its_sandbox(exported, monkeypatch) -> None:
    from verl.experimental.agent_loop.tool_agent_loop import ToolAgentLoop
    from verl.experimental.agent_loop.tool_parser import FunctionCall

    from envreg.rollout.verl import sessions

    rows, tools, _ = exported
    row = rows[0]
    task, _ = _task(row)
    loop = _loop(tools)
    seen = {}

    async def tool_agent_run(self, sampling_params, **kwargs):  # the model's part of verl's loop, scripted
        from verl.experimental.agent_loop.agent_loop import AgentLoopOutput

        data = _agent_data(row)
        for call in task.turns[0].calls[:2]:
            fc = FunctionCall(name=f"{call.env}__{call.tool}", arguments=json.dumps(call.arguments))
            await self._call_tool(fc, kwargs["tools_kwargs"], data)
        _, pool = sessions()
        seen["open"] = len(pool.open)
        return AgentLoopOutput(prompt_ids=[1], response_ids=[2], response_mask=[1], metrics={})

    monkeypatch.setattr(ToolAgentLoop, "run", tool_agent_run)
    output = _run(loop.run({}, raw_prompt=row["prompt"], tools_kwargs=row["extra_info"]["tools_kwargs"]))
    _, pool = sessions()
    assert seen["open"] == 1 and pool.open == {}
    expected = [c for c in task.turns[0].calls if not c.is_error]
    assert output.extra_fields["envreg"]["matched_calls"] == float(sum(1 for c in expected[:2]))
    assert 0.0 <= output.reward_score < 1.0 and output.reward_score == output.extra_fields["envreg"]["score"]
