"""The main job: `envreg episode` plays a scenario over MCP in a real sandbox and scores it."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import ROOT

from envreg.env.scenario import CallOutcome
from envreg.episode import EpisodeReport


def test_reward_combines_trace_and_state() -> None:
    report = EpisodeReport("s", calls=[("t", {}, CallOutcome(False, "1"))] * 4, state_matches=True)
    assert report.trace_score == 1.0 and report.reward() == 1.0
    report.failures = ["step 2 (t): unexpected error: boom", "step 4 (t): expected 1, got 2"]
    report.state_matches = False
    assert report.trace_score == 0.5
    assert report.reward() == pytest.approx(0.25)
    assert report.reward(alpha=1.0) == pytest.approx(0.5)


@pytest.mark.docker
@pytest.mark.parametrize(
    "args",
    [["calendar"], ["bank", "--isolation", "instance", "--protocol", "2025-11-25"]],
    ids=["calendar-container-2026", "bank-instance-2025"],
)
def test_episode_command_plays_and_scores_a_scenario(reference_images, args) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "envreg.cli.main", "episode", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "/sandboxes/sb_" in proc.stdout, "the agent goes through the gateway"
    assert "matches the scenario's expected state: yes" in proc.stdout
    assert "= 1.000" in proc.stdout
    assert "final state sha256: " in proc.stdout


@pytest.mark.docker
def test_episode_command_refuses_an_unknown_scenario(reference_images) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "envreg.cli.main", "episode", "calendar", "--scenario", "no-such-scenario"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2
    assert "no scenario 'no-such-scenario'" in proc.stdout
