"""The episode loop on the local tier, in process, against the scripted stand-in model over real HTTP:
good, bad and malformed answers, per-turn rewards and state hashes, budgets, policy failures,
cancellation, GRPO groups by fork, many episodes at once."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import anyio
import pytest
from rollout_helpers import catalog_tasks, rollouts, state_hash, two_turn_task

from envreg.env.augment import Augmentation
from envreg.rollout import ChatPolicy, EpisodeOptions, PolicyError, Rollouts, Session
from envreg.runtime import Runtime
from envreg.standin import StandInLLM, text, tool_calls

pytestmark = pytest.mark.anyio
TASKS = catalog_tasks("calendar", "bank")


async def _run(script: str, tasks=TASKS, options: EpisodeOptions | None = None):
    async with rollouts(script, tasks, options=options) as runner:
        records = await runner.run([(t, 0) for t in tasks], concurrency=4)
        return sorted(records, key=lambda r: r.task_id), runner


async def test_oracle_answers_pass_every_scenario_with_provenance() -> None:
    records, runner = await _run("oracle")
    assert len(records) == len(TASKS) and all(r.passed for r in records), [
        r.task_id for r in records if not r.passed
    ]
    tasks = {t.id: t for t in TASKS}
    for record in records:
        task = tasks[record.task_id]
        assert record.reward.reward == 1.0 and record.error is None and record.stop == "answered"
        (env,) = record.envs
        assert env.isolation == "local" and env.digest.startswith("sha256:")
        assert env.initial_state_sha256 == state_hash(task.initial_states[env.name])
        assert env.final_state_sha256 == state_hash(task.final_states[env.name]), (
            "the live sandbox reached the oracle"
        )
        assert record.turns[0].state_sha256 == {env.name: env.final_state_sha256}
        assert [c.tool for c in record.turns[0].calls] == [c.tool for c in task.turns[0].calls]
        assert record.model == "standin" and record.base_url == runner.policy.base_url
        assert {"total", "policy", "tools", "envreg", "acquire", "score"} <= set(record.timings)
        assert record.turns[0].reward == record.reward


async def test_parallel_calls_in_one_message() -> None:
    records, _ = await _run("parallel", options=EpisodeOptions(max_parallel_calls=64))
    assert all(r.passed for r in records)
    for record in records:
        tool_messages = [m for m in record.turns[0].messages if m.get("tool_calls")]
        assert len(tool_messages) == 1, "every oracle call came in one assistant message"
        assert len(tool_messages[0]["tool_calls"]) == len(record.turns[0].calls)


@pytest.mark.parametrize("script", ["bad", "malformed", "prose", "refuse"])
async def test_wrong_answers_never_pass(script: str) -> None:
    records, _ = await _run(script)
    assert not any(r.passed for r in records)
    for record in records:
        b = record.reward
        assert b.reward < 0.6, (record.task_id, b.reward)
        calls = record.turns[0].calls
        if script == "bad":
            assert calls and all(c.status == "error" for c in calls) and b.bad_arguments == len(calls)
        if script == "malformed":
            assert calls and all(c.status == "malformed" for c in calls) and b.malformed == len(calls)
            assert b.p_format == 1.0 and all(c.result.startswith("Invalid tool call") for c in calls)
        if script in ("prose", "refuse"):
            assert calls == [] and b.predicted_calls == 0


async def test_calls_beyond_the_parallel_limit_are_not_run() -> None:
    (task,) = [t for t in TASKS if t.id == "bank/pay_new_payee_chain"]
    async with rollouts("parallel", [task], options=EpisodeOptions(max_parallel_calls=2)) as runner:
        record = await runner.episode(task)
    answers = [m["content"] for m in record.turns[0].messages if m["role"] == "tool"]
    assert len(record.turns[0].calls) == 2 and len(answers) == len(task.turns[0].calls)
    assert all(a.startswith("Not run: at most 2 tool calls") for a in answers[2:]) and not record.passed


async def test_multi_turn_task_has_a_state_hash_and_a_reward_per_turn() -> None:
    task = two_turn_task()
    async with rollouts("oracle", [task]) as runner:
        record = await runner.episode(task)
    assert record.passed and len(record.turns) == 2
    for k, turn in enumerate(record.turns):
        assert turn.state_sha256 == {"bank": state_hash(task.turns[k].states["bank"])}
        assert turn.reward is not None and turn.reward.reward == 1.0
        assert turn.reward.expected_calls == sum(1 for c in task.turns[k].calls if not c.is_error)
    users = [m for m in record.turns[1].messages if m["role"] == "user"]
    assert users == [] and record.turns[1].user == "part 2 of pay_new_payee_chain"


async def test_second_turn_alone_scores_what_was_done_in_it() -> None:
    task = two_turn_task()

    def first_turn_only(body):
        users = [m for m in body["messages"] if m["role"] == "user"]
        return script(body) if len(users) == 1 else text("Nothing more to do.")

    from envreg.standin import Scripted

    script = Scripted([task], "oracle")
    async with rollouts(first_turn_only) as runner:
        record = await runner.episode(task)
    assert not record.passed
    assert record.turns[0].reward.reward == 1.0
    assert record.turns[1].reward.matched_calls == 0 and record.turns[1].reward.r_state == 0.0


async def test_step_limit_ends_the_turn() -> None:
    (task,) = [t for t in TASKS if t.id == "bank/pay_new_payee_chain"]
    async with rollouts("oracle", [task], options=EpisodeOptions(max_steps=2)) as runner:
        record = await runner.episode(task)
    assert record.stop == "step_limit" and record.turns[0].steps == 2 and len(record.turns[0].calls) == 2
    assert not record.passed


async def test_token_budget_ends_the_episode() -> None:
    (task,) = [t for t in TASKS if t.id == "bank/pay_new_payee_chain"]
    async with rollouts("oracle", [task], options=EpisodeOptions(max_tokens=3)) as runner:
        record = await runner.episode(task)
    assert record.stop == "token_budget" and record.completion_tokens == 3 and record.turns[0].steps == 3


async def test_latency_budget_ends_the_episode() -> None:
    (task,) = [t for t in TASKS if t.id == "bank/pay_new_payee_chain"]
    async with rollouts("oracle", [task], latency=0.05, options=EpisodeOptions(max_seconds=0.04)) as runner:
        record = await runner.episode(task)
    assert record.stop == "latency_budget" and record.turns[0].steps == 1
    assert record.timings["policy"] >= 0.05


async def test_unknown_tool_is_answered_and_counted() -> None:
    task = TASKS[0]
    calls = iter([tool_calls(("no_such_tool", "{}")), text("done")])
    async with rollouts(lambda body: next(calls), [task]) as runner:
        record = await runner.episode(task)
    (call,) = record.turns[0].calls
    assert call.status == "unknown_tool" and call.result.startswith("Unknown tool 'no_such_tool'")
    assert record.reward.unknown_tools == 1 and not record.passed


async def test_tools_are_the_manifest_schemas_with_the_augmentations_decoys() -> None:
    manifest = json.loads(Path("manifests/bank.json").read_text())
    decoy = {
        "name": "book_table",
        "description": "Book a restaurant table.",
        "inputSchema": {"type": "object", "properties": {}},
    }
    task = TASKS[-1].model_copy(update={"augmentation": {"bank": Augmentation(seed=3, distractors=[decoy])}})
    async with rollouts("oracle", [task]) as runner:
        record = await runner.episode(task)
        tools = runner.llm.requests[0]["tools"]
    by_name = {t["function"]["name"]: t["function"] for t in tools}
    assert set(by_name) == {t["name"] for t in manifest["tools"]} | {"book_table"}
    for spec in manifest["tools"]:
        assert by_name[spec["name"]]["parameters"] == spec["inputSchema"]
    assert record.passed, "the decoy changes nothing for a model that does not call it"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_unreachable_model_is_an_error_and_releases_the_sandboxes() -> None:
    async with Runtime() as rt:
        policy = ChatPolicy(f"http://127.0.0.1:{_closed_port()}/v1", "m", attempts=2)
        runner = Rollouts(rt, policy)
        record = await runner.episode(TASKS[0])
        assert record.stop == "error" and "no connection to the model" in record.error
        await runner.aclose()  # the scorer's idle sandboxes
        assert not record.passed and rt.sandboxes == {}
        await policy.aclose()


async def test_a_request_that_was_sent_is_not_repeated() -> None:
    from starlette.responses import JSONResponse

    with StandInLLM(lambda body: text("x")) as llm:
        hits = []

        async def broken(request):
            hits.append(1)
            return JSONResponse({"error": "overloaded"}, status_code=500)

        llm.app.router.routes[0].endpoint = broken  # answer 500 to every chat request
        llm.app.router.routes[0].app = __import__(
            "starlette.routing", fromlist=["request_response"]
        ).request_response(broken)
        policy = ChatPolicy(llm.base_url, "standin", attempts=3)
        with pytest.raises(PolicyError, match="HTTP 500"):
            await policy.complete([{"role": "user", "content": "hi"}], [], {})
        await policy.aclose()
    assert hits == [1]


async def test_cancelled_episodes_release_their_sandboxes() -> None:
    async with rollouts("oracle", TASKS, latency=2.0) as runner:
        with anyio.move_on_after(0.5):
            await runner.run([(t, 0) for t in TASKS], concurrency=len(TASKS))
        assert runner.runtime.sandboxes == {}, "every sandbox was released on cancellation"


async def test_grpo_group_forks_one_snapshot() -> None:
    (task,) = [t for t in TASKS if t.id == "bank/pay_new_payee_chain"]
    async with rollouts("oracle", [task]) as runner:
        records = await runner.group(task, 4)
        await runner.aclose()
        assert runner.runtime.sandboxes == {}
    assert len(records) == 4 and all(r.passed for r in records)
    assert len({r.group for r in records}) == 1 and records[0].group.startswith("grp_")
    snapshots = {r.envs[0].snapshot_id for r in records}
    assert len(snapshots) == 1 and None not in snapshots
    assert sorted(r.trial for r in records) == [0, 1, 2, 3]


async def test_group_sessions_are_separate_sandboxes() -> None:
    (task,) = [t for t in TASKS if t.id == "bank/pay_new_payee_chain"]
    async with Runtime() as rt:
        sessions = await Session.group(rt, task, 3)
        first = task.turns[0].calls[0]
        await sessions[0].call(first.tool, first.arguments)
        write = next(c for c in task.turns[0].calls if c.tool == "add_payee")
        await sessions[0].call(write.tool, write.arguments)
        hashes = [await s.state_sha256() for s in sessions]
        assert hashes[0] != hashes[1] == hashes[2] == {"bank": state_hash(task.initial_states["bank"])}
        for s in sessions:
            await s.close()
        assert rt.sandboxes == {}


async def test_many_episodes_at_once_without_cross_talk() -> None:
    tasks = list(TASKS) * 3
    async with rollouts("oracle", TASKS) as runner:
        records = await runner.run([(t, i) for i, t in enumerate(tasks)], concurrency=len(tasks))
    finals = {t.id: state_hash(t.final_states[t.envs[0]]) for t in TASKS}
    assert len(records) == len(tasks)
    assert all(r.envs[0].final_state_sha256 == finals[r.task_id] for r in records)
