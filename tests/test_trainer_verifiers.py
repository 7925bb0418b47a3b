"""verifiers as installed from PyPI: `vf.load_environment("envreg.rollout.verifiers", ...)` gives a
StatefulToolEnv on envreg sandboxes whose rubric is envreg's reward; evaluated with verifiers' own
client against the scripted stand-in model."""

from __future__ import annotations

import pytest
from reward_helpers import executed_trajectory
from rollout_helpers import catalog_tasks

vf = pytest.importorskip(
    "verifiers", reason="verifiers is not installed: scripts/bootstrap --trainers installs it"
)

from envreg.standin import Scripted, StandInLLM  # noqa: E402


@pytest.fixture(autouse=True)
def api_key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")


def _evaluate(env, tasks, script: str, n: int = 3, k: int = 2) -> list[dict]:
    with StandInLLM(Scripted(tasks, script)) as llm:
        client = vf.ClientConfig(api_base_url=llm.base_url, api_key_var="OPENAI_API_KEY")
        out = env.evaluate_sync(client, model="standin", num_examples=n, rollouts_per_example=k)
    return out["outputs"]


def test_load_environment_gives_a_stateful_tool_env_of_the_scenarios() -> None:
    from envreg.rollout.verifiers import EnvregToolEnv  # imports verifiers' environments: seconds

    env = vf.load_environment("envreg.rollout.verifiers", envs=["bank"])
    assert isinstance(env, EnvregToolEnv) and isinstance(env, vf.StatefulToolEnv)
    rows = env.get_dataset().to_list()
    assert len(rows) == len(catalog_tasks("bank"))
    names = {d["name"] for d in rows[0]["info"]["tool_defs"]}
    assert {"find_customer", "pay_payee", "add_payee"} <= names


def test_oracle_rollouts_score_one_in_their_own_sandboxes() -> None:
    tasks = catalog_tasks("bank")
    env = vf.load_environment("envreg.rollout.verifiers", envs=["bank"])
    outputs = _evaluate(env, tasks, "oracle")
    assert len(outputs) == 6 and all(o["error"] is None for o in outputs)
    assert [o["reward"] for o in outputs] == [1.0] * 6
    assert all(o["metrics"]["r_state"] == 1.0 and o["metrics"]["r_traj"] == 1.0 for o in outputs)
    _, pool = env.pool()
    assert pool.open == {}, "every rollout's sandboxes were closed"


@pytest.mark.parametrize("script", ["bad", "malformed", "prose"])
def test_wrong_answers_score_low(script: str) -> None:
    tasks = catalog_tasks("bank")
    env = vf.load_environment("envreg.rollout.verifiers", envs=["bank"])
    outputs = _evaluate(env, tasks, script, n=2, k=1)
    assert all(o["reward"] < 0.6 for o in outputs)
    if script == "malformed":
        assert all(o["metrics"]["p_format"] == 1.0 for o in outputs)


def test_tasks_from_a_trajectory_file(tmp_path) -> None:
    record = executed_trajectory("calendar", "book_meeting_with_contact")
    path = tmp_path / "trajectories.jsonl"
    path.write_text(record.model_dump_json() + "\n")
    env = vf.load_environment("envreg.rollout.verifiers", tasks=str(path))
    from envreg.rollout import read_tasks

    outputs = _evaluate(env, read_tasks(path), "oracle", n=1, k=2)
    assert [o["reward"] for o in outputs] == [1.0, 1.0]


def test_nothing_to_load_is_refused() -> None:
    with pytest.raises(RuntimeError, match="give envs="):  # verifiers wraps what load_environment raised
        vf.load_environment("envreg.rollout.verifiers")
