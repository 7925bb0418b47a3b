"""`envreg reward score` on files and `envreg reward serve` over real HTTP on loopback."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import anyio
import httpx2
import pytest
from conftest import ROOT, needs_main_thread
from reward_helpers import as_openai_messages, as_tool_call_tags, scenario_truth
from servers import ctrl_c_as_from_a_terminal
from warm_start import WarmProcess

from envreg.http.client import request as http_request


def envreg(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "envreg.cli.main", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def items() -> list[dict]:
    bank = scenario_truth("bank", "pay_new_payee_chain")
    cal = scenario_truth("calendar", "book_meeting_with_contact")
    ok_bank = [c for c in bank["calls"] if not c["is_error"]]
    return [
        {"record": bank, "output": as_tool_call_tags(ok_bank)},
        {"record": cal, "output": as_openai_messages(cal["calls"])},
        {"record": bank, "output": as_tool_call_tags(ok_bank[:3])},
        {"record": json.dumps(bank), "output": "<tool_call>{broken</tool_call>"},
    ]


def test_score_prints_a_table_and_a_summary(tmp_path, items) -> None:
    path = tmp_path / "items.jsonl"
    path.write_text("\n".join(json.dumps(i) for i in items) + "\n")
    proc = envreg("reward", "score", str(path))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split()[:8] == ["#", "ID", "REWARD", "GATE", "R_TRAJ", "R_STATE", "R_RESP", "R_ANS"]
    assert "bank/pay_new_payee_chain" in lines[1] and "1.000" in lines[1]
    assert "no_calls" in lines[4], "a malformed answer earns nothing, and the table says why"
    assert "4 scored, 0 failed" in proc.stderr


def test_score_json_has_every_component(tmp_path, items) -> None:
    path = tmp_path / "items.json"
    path.write_text(json.dumps(items))
    proc = envreg("reward", "score", str(path), "--json", "--partial-state")
    assert proc.returncode == 0, proc.stderr
    results = [json.loads(line)["result"] for line in proc.stdout.splitlines()]
    assert [r["reward"] == 1.0 for r in results] == [True, True, False, False]
    assert 0 < results[2]["r_state"] < 1, "partial credit for a partial run"
    assert results[3]["malformed"] == 1 and results[3]["p_format"] == 1.0
    assert results[3]["reward"] == 0.0 and results[3]["gate"] == "no_calls"
    for key in ("r_traj", "r_state", "p_length", "p_format", "states", "calls", "missing"):
        assert key in results[0]


def test_score_refuses_bad_input_clearly(tmp_path, items) -> None:
    proc = envreg("reward", "score", str(tmp_path / "nope.jsonl"))
    assert proc.returncode == 2 and "no such file" in proc.stderr
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(items[0]) + "\n{not json\n")
    proc = envreg("reward", "score", str(bad))
    assert proc.returncode == 2 and "bad.jsonl:2: not valid JSON" in proc.stderr
    bare = tmp_path / "records.jsonl"
    bare.write_text(json.dumps({"turns": []}) + "\n")
    proc = envreg("reward", "score", str(bare))
    assert proc.returncode == 2 and "--oracle" in proc.stderr
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text(json.dumps(items[0]) + "\n" + json.dumps({"record": {"envs": []}, "output": ""}) + "\n")
    proc = envreg("reward", "score", str(mixed))
    assert proc.returncode == 1, "a bad record fails its item, not the run"
    assert "1 scored, 1 failed" in proc.stderr and "item 1:" in proc.stderr


class RewardServer:
    def __init__(self, *args: str) -> None:
        env = {**os.environ, "ENVREG_REWARD_TOKEN": "t0ken"}
        self.proc = WarmProcess(
            ["reward", "serve", "--port", "0", *args], env, stderr=subprocess.PIPE, text=True
        )
        deadline = time.time() + 60
        self.url = ""
        while time.time() < deadline and not self.url:
            line = self.proc.stderr.readline()
            if match := re.search(r"(http://127\.0\.0\.1:\d+)", line):
                self.url = match.group(1)
            elif not line and self.proc.poll() is not None:
                break
        assert self.url, "the server printed its URL"
        self.auth = {"authorization": "Bearer t0ken"}

    def stop(self) -> int:
        self.proc.terminate()
        return self.proc.wait(timeout=30)


@needs_main_thread
@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, -signal.SIGTERM), (signal.SIGINT, 0)])
def test_the_server_stops_on_sigterm_and_ctrl_c(signum: int, code: int) -> None:
    """Ended by SIGTERM as a process is (what a supervisor reads); Ctrl-C is a clean exit."""
    with ctrl_c_as_from_a_terminal():
        s = RewardServer()
    s.proc.send_signal(signum)
    assert s.proc.wait(timeout=30) == code
    assert "Traceback" not in s.proc.stderr.read()


@pytest.fixture(scope="module")
def server():
    s = RewardServer("--max-batch", "50", "--concurrency", "4")
    yield s
    assert s.stop() in (0, -15)


def test_serve_scores_a_batch_in_order_with_per_item_errors(server, items) -> None:
    batch = [*items, {"record": {"envs": ["bank"]}, "output": ""}]
    response = http_request(
        "POST", f"{server.url}/v1/score", json={"items": batch}, headers=server.auth, timeout=60
    )
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    assert [r["index"] for r in results] == list(range(len(batch)))
    assert results[0]["result"]["reward"] == 1.0
    assert results[3]["result"]["malformed"] == 1
    assert "error" in results[4] and "initial_states" in results[4]["error"]


def test_serve_needs_the_token_and_documents_itself(server) -> None:
    assert http_request("POST", f"{server.url}/v1/score", json={"items": []}).status_code == 401
    assert http_request("GET", f"{server.url}/openapi.json").status_code == 401
    doc = http_request("GET", f"{server.url}/openapi.json", headers=server.auth).json()
    assert "/v1/score" in doc["paths"] and "ScoreItem" in doc["components"]["schemas"]
    health = http_request("GET", f"{server.url}/v1/healthz", headers=server.auth).json()
    assert health["isolation"] == "local" and health["max_batch"] == 50


def test_serve_bounds_batches_and_refuses_bad_bodies(server, items) -> None:
    big = http_request(
        "POST", f"{server.url}/v1/score", json={"items": [items[0]] * 51}, headers=server.auth, timeout=60
    )
    assert big.status_code == 413 and "at most 50" in big.json()["error"]
    bad = http_request("POST", f"{server.url}/v1/score", json={"things": []}, headers=server.auth)
    assert bad.status_code == 400 and "items" in bad.json()["error"]


def test_serve_answers_64_concurrent_requests(server, items) -> None:
    async def main() -> list[int]:
        statuses: list[int] = []
        async with httpx2.AsyncClient(headers=server.auth, timeout=120) as client:

            async def one() -> None:
                r = await client.post(f"{server.url}/v1/score", json={"items": items[:2]})
                statuses.append(r.status_code)
                assert all(x["result"]["r_state"] == 1.0 for x in r.json()["results"])

            async with anyio.create_task_group() as tg:
                for _ in range(64):
                    tg.start_soon(one)
        return statuses

    assert anyio.run(main) == [200] * 64


def test_fuzz_the_api_against_its_own_document(server) -> None:
    """schemathesis: every generated request (valid or not) gets a documented answer, never a 5xx."""
    import schemathesis
    from hypothesis import HealthCheck, given, settings
    from schemathesis import GenerationMode

    auth = {"Authorization": server.auth["authorization"]}  # the header name schemathesis drops to probe auth
    schema = schemathesis.openapi.from_url(f"{server.url}/openapi.json", headers=auth)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert {op.path for op in operations} == {"/v1/score", "/v1/healthz"}
    for operation in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):

            @given(case=operation.as_strategy(generation_mode=mode))
            @settings(max_examples=25, deadline=None, database=None, suppress_health_check=list(HealthCheck))
            def check(case) -> None:
                response = case.call_and_validate(base_url=server.url, headers=auth)
                assert response.status_code < 500, response.text
                if response.status_code >= 400:
                    assert response.json()["error"]

            check()


def test_the_answer_check_can_be_turned_off_for_a_blind_policy(tmp_path) -> None:
    """A policy that emits its calls without seeing their results cannot state what they found."""
    truth = scenario_truth("papers", "follow_citations_and_authors")
    path = tmp_path / "blind.jsonl"
    path.write_text(json.dumps({"record": truth, "output": as_tool_call_tags(truth["calls"])}) + "\n")
    checked = envreg("reward", "score", str(path), "--json")
    blind = envreg("reward", "score", str(path), "--json", "--no-check-answer")
    assert checked.returncode == blind.returncode == 0, checked.stderr + blind.stderr
    assert json.loads(checked.stdout)["result"]["reward"] == 0.5
    assert json.loads(blind.stdout)["result"]["reward"] == 1.0


EVIL_ENV = """
import pathlib
pathlib.Path(__file__).with_name("imported").write_text("env.py ran")
from envreg.env import Environment, EnvState
class S(EnvState):
    pass
env = Environment("evilenv", S, version="1.0.0", domain="test", description="Runs code on import.")
"""


def test_serve_resolves_environments_only_from_its_catalog(server, items, tmp_path) -> None:
    evil = tmp_path / "somewhere" / "evilenv"
    evil.mkdir(parents=True)
    (evil / "env.py").write_text(EVIL_ENV)
    batch = []
    for name in (os.path.relpath(evil, ROOT), str(evil)):
        record = json.loads(json.dumps(items[0]["record"]).replace('"bank"', json.dumps(name)))
        batch.append({"record": record, "output": items[0]["output"]})
    response = http_request(
        "POST", f"{server.url}/v1/score", json={"items": batch}, headers=server.auth, timeout=60
    )
    assert response.status_code == 200, response.text
    for result in response.json()["results"]:
        assert "not in this server's catalog" in result["error"], result
    assert not (evil / "imported").exists(), "the record's folder was imported"


def test_serve_caps_request_bodies(server, items) -> None:
    padding = "x" * (17 << 20)
    body = {"items": [{"record": items[0]["record"], "output": padding}]}
    response = http_request("POST", f"{server.url}/v1/score", json=body, headers=server.auth, timeout=60)
    assert response.status_code == 413
    assert "over this server's limit of 16,777,216 bytes" in response.json()["error"]


def test_serve_takes_its_token_from_a_file_and_never_shows_it(tmp_path) -> None:
    token_file = tmp_path / "reward.token"
    env = {k: v for k, v in os.environ.items() if k != "ENVREG_REWARD_TOKEN"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "envreg.cli.main", "reward", "serve", "--port", "0", "--token-file", str(token_file)],
        cwd=ROOT, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        banner = [proc.stderr.readline() for _ in range(2)]
        token = token_file.read_text().strip()
        assert len(token) >= 32 and oct(token_file.stat().st_mode & 0o777) == "0o600"
        assert str(token_file) in banner[1]
        assert not any(token in line for line in banner) and token not in " ".join(proc.args)
        url = re.search(r"(http://127\.0\.0\.1:\d+)", banner[0]).group(1)
        health = http_request("GET", f"{url}/v1/healthz", headers={"authorization": f"Bearer {token}"})
        assert health.status_code == 200
    finally:
        proc.terminate()
        proc.wait(timeout=30)
