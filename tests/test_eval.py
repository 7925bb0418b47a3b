"""`envreg eval` end to end against the scripted stand-in model: pass@1 and pass^k, tables by environment
and domain, JSON and JUnit, resuming from the results folder, and bad input."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest
from rollout_helpers import catalog_tasks
from typer.testing import CliRunner

from envreg.cli.main import app
from envreg.rollout.evaluate import pass_hat
from envreg.standin import Scripted, StandInLLM

runner = CliRunner()


def _eval(llm: StandInLLM, *args: str):
    return runner.invoke(app, ["eval", "--base-url", llm.base_url, "--model", "standin", *args])


def test_pass_hat_is_taus() -> None:
    assert pass_hat(4, 4, 3) == 1.0 and pass_hat(4, 0, 1) == 0.0
    assert pass_hat(4, 2, 1) == 0.5 and pass_hat(4, 2, 2) == pytest.approx(1 / 6)


def test_pass_at_1_and_pass_hat_k_by_environment_and_domain(tmp_path) -> None:
    tasks = catalog_tasks("calendar", "bank")
    with StandInLLM(Scripted(tasks, "flaky")) as llm:  # even seeds play the oracle, odd seeds fail
        result = _eval(llm, "--env", "calendar", "--env", "bank", "-k", "2", "--seed", "0", "--out",
                       str(tmp_path / "run"), "--json", "--junit", str(tmp_path / "junit.xml"))  # fmt: skip
        seeds = sorted({r.get("seed") for r in llm.requests})
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert seeds == [0, 1]
    overall = summary["overall"]
    assert overall["tasks"] == len(tasks) and overall["episodes"] == 2 * len(tasks)
    assert overall["pass@1"] == 0.5 and overall["pass^1"] == 0.5 and overall["pass^2"] == 0.0
    assert {r["name"] for r in summary["environments"]} == {"calendar", "bank"}
    assert {r["name"] for r in summary["domains"]} == {"office", "finance"}
    assert all(t["passed"] == 1 and t["trials"] == 2 for t in summary["tasks"])
    junit = ET.parse(tmp_path / "junit.xml").getroot()
    assert junit.get("tests") == str(len(tasks)) and junit.get("failures") == str(len(tasks))
    assert (tmp_path / "run" / "summary.json").exists()


def test_oracle_passes_everything_and_prints_tables(tmp_path) -> None:
    tasks = catalog_tasks("bank")
    with StandInLLM(Scripted(tasks, "oracle")) as llm:
        result = _eval(llm, "--env", "bank", "--out", str(tmp_path / "run"))
    assert result.exit_code == 0, result.output
    assert "ENVIRONMENT" in result.stdout and "DOMAIN" in result.stdout
    line = next(line for line in result.stdout.splitlines() if line.startswith("bank "))
    assert line.split()[1:4] == ["8", "8", "1.000"]


def test_resumes_from_its_folder(tmp_path) -> None:
    tasks = catalog_tasks("calendar")
    out = tmp_path / "run"
    with StandInLLM(Scripted(tasks, "oracle")) as llm:
        assert _eval(llm, "--env", "calendar", "--out", str(out)).exit_code == 0
        first = len(llm.requests)
        records = (out / "records.jsonl").read_text().splitlines()
        assert len(records) == len(tasks)
        again = _eval(llm, "--env", "calendar", "--out", str(out))
        assert again.exit_code == 0 and len(llm.requests) == first, "nothing was played again"
        assert f"{len(tasks)} of {len(tasks)} episodes already done" in again.stderr
        # an interrupted run leaves a cut last line: that episode is played again, and only that one
        (out / "records.jsonl").write_text("\n".join(records[:-1]) + "\n" + records[-1][:40])
        resumed = _eval(llm, "--env", "calendar", "--out", str(out), "--json")
        assert resumed.exit_code == 0, resumed.output
        replayed = {r["messages"][1]["content"] for r in llm.requests[first:]}
    last = json.loads(records[-1])["task_id"]
    assert replayed == {next(t.turns[0].user for t in tasks if t.id == last)}
    assert len((out / "records.jsonl").read_text().splitlines()) == len(tasks)
    assert json.loads(resumed.stdout)["overall"]["pass@1"] == 1.0


def test_a_folder_of_another_configuration_is_refused(tmp_path) -> None:
    tasks = catalog_tasks("calendar")
    out = str(tmp_path / "run")
    with StandInLLM(Scripted(tasks, "oracle")) as llm:
        assert _eval(llm, "--env", "calendar", "--out", out).exit_code == 0
        before = (tmp_path / "run" / "records.jsonl").read_text()
        refused = _eval(llm, "--env", "calendar", "--out", out, "-k", "3")
        assert refused.exit_code == 1
        assert "another configuration (trials differ)" in refused.stderr and "hint:" in refused.stderr
        assert (tmp_path / "run" / "records.jsonl").read_text() == before, "nothing was lost"
        restarted = _eval(llm, "--env", "calendar", "--out", out, "-k", "3", "--restart", "--json")
    assert restarted.exit_code == 0 and json.loads(restarted.stdout)["overall"]["episodes"] == 3 * len(tasks)


def test_bad_input_says_what_to_do(tmp_path) -> None:
    with StandInLLM(lambda body: {"role": "assistant", "content": "x"}) as llm:
        tier = _eval(llm, "--env", "calendar", "--isolation", "cloud")
        nothing = _eval(llm)
        (tmp_path / "tasks.jsonl").write_text('{"id": "x"}\n')
        bad_file = _eval(llm, "--tasks", str(tmp_path / "tasks.jsonl"))
    assert tier.exit_code == 2 and "bad --isolation 'cloud'" in tier.stderr
    assert nothing.exit_code == 2 and "give --env NAME, --all or --tasks FILE" in nothing.stderr
    assert (
        bad_file.exit_code == 2 and "tasks.jsonl:1: neither a task nor a trajectory record" in bad_file.stderr
    )


def test_an_unreachable_model_fails_the_run(tmp_path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = runner.invoke(
        app,
        [
            "eval",
            "--base-url",
            f"http://127.0.0.1:{port}/v1",
            "--model",
            "m",
            "--env",
            "bank",
            "--out",
            str(tmp_path / "r"),
        ],
    )
    assert result.exit_code == 1
    assert "ended in an error" in result.stderr and "no connection to the model" in result.stderr
