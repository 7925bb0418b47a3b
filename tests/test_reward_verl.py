"""verl's custom reward function on the RL parquet that `envreg synth` exports, loaded the way verl loads it."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import REFERENCE_ENVS, ROOT
from reward_helpers import as_tool_call_tags, executed_trajectory

import envreg.reward.verl as verl_module
from envreg.env import load_environment, load_scenarios
from envreg.manifest import build_manifest


@pytest.fixture(scope="module")
def rl_parquet(tmp_path_factory) -> Path:
    """The RL export (`envreg.synth.export`, verl layout) of executed trajectories: two scenarios of
    every environment of the catalog."""
    from envreg.synth.export import export

    records, manifests = [], {}
    for env in REFERENCE_ENVS:
        environment = load_environment(env)
        manifests[env] = build_manifest(environment)
        for i, scenario in enumerate(load_scenarios(environment.folder)[0][:2]):
            records.append(executed_trajectory(env, scenario.name, seed=i))
    return export(records, tmp_path_factory.mktemp("rl"), manifests, formats=["rl"])["rl"]


def load_like_verl(path: str, name: str = "compute_score"):
    """verl's get_custom_reward_fn: import the file as `custom_module`, take the function by name."""
    spec = importlib.util.spec_from_file_location("custom_module", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["custom_module"] = module
    spec.loader.exec_module(module)
    return getattr(module, name)


def test_compute_score_on_a_verl_parquet_file(rl_parquet) -> None:
    rows = pq.read_table(rl_parquet).to_pylist()  # read back from the parquet file, as verl's dataset does
    assert len(rows) >= 10
    assert {"data_source", "prompt", "ability", "reward_model", "extra_info"} <= rows[0].keys()
    compute_score = load_like_verl(verl_module.__file__)
    reward_kwargs = {"alpha": 0.5, "gamma": 0.1}
    for row in rows:
        truth = row["reward_model"]["ground_truth"]
        calls, answer = json.loads(truth)["calls"], json.loads(truth)["answer"]
        # the response a policy would produce: the oracle's calls, errors included, and its answer
        result = compute_score(
            data_source=row["data_source"],
            solution_str=as_tool_call_tags(calls, answer=answer),
            ground_truth=truth,
            extra_info=row["extra_info"],
            reward_router_address=None,  # verl passes extra keywords; they are ignored
            **reward_kwargs,
        )
        assert result["score"] == 1.0, (row["extra_info"], result)
        assert all(isinstance(v, float) for v in result.values())
        last = max(i for i, c in enumerate(calls) if not c["is_error"])  # drop the last call it must make
        missing_one = as_tool_call_tags(calls[:last] + calls[last + 1 :], answer=answer)
        wrong = compute_score(row["data_source"], missing_one, truth, row["extra_info"], **reward_kwargs)
        assert wrong["score"] < 1.0 and wrong["r_traj"] < 1.0
        empty = compute_score(row["data_source"], "I cannot help with that.", truth, row["extra_info"])
        assert empty["r_traj"] == 0.0 and empty["predicted_calls"] == 0.0
        assert empty["score"] == 0.0 and empty["gated"] == 1.0, "a refusal earns nothing"


def test_a_whole_record_as_ground_truth() -> None:
    record = executed_trajectory("airline", "change_flight_rules")
    calls = [c.model_dump() for c in record.calls]
    result = verl_module.compute_score(
        "envreg", as_tool_call_tags(calls), record.model_dump_json(), {"index": 0}
    )
    assert result["score"] == 1.0


def test_compute_score_is_safe_from_many_threads(tmp_path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    record = executed_trajectory("calendar", "book_meeting_with_contact")
    truth = record.model_dump_json()
    good = as_tool_call_tags([c.model_dump() for c in record.calls])
    with ThreadPoolExecutor(8) as pool:
        scores = list(
            pool.map(
                lambda i: verl_module.compute_score("envreg", good if i % 2 else "", truth, gamma=0),
                range(64),
            )
        )
    assert [s["score"] for s in scores[1::2]] == [1.0] * 32
    assert all(s["r_traj"] == 0.0 for s in scores[0::2])


def test_a_bad_ground_truth_names_the_problem() -> None:
    with pytest.raises(ValueError, match="not valid JSON"):
        verl_module.compute_score("envreg", "", "{oops")


def test_cli_checks_a_parquet_file_against_its_own_calls(rl_parquet) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "envreg.cli.main", "reward", "score", str(rl_parquet), "--oracle", "--json"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    results = [json.loads(line) for line in proc.stdout.splitlines()]
    assert results and all(r["result"]["reward"] == 1.0 for r in results)
    assert "evaluations/s" in proc.stderr
