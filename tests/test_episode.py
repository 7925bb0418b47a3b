"""The main job: `envreg episode` plays a scenario over MCP in a real sandbox and scores it."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import ROOT

from envreg.env import load_environment, load_scenarios
from envreg.env.scenario import CallOutcome
from envreg.episode import EpisodeReport, score_episode


@pytest.mark.anyio
async def test_the_episode_reward_is_the_composite_reward() -> None:
    env = load_environment("bank")
    scenario = next(s for s in load_scenarios(env.folder)[0] if s.name == "pay_new_payee_chain")
    played = [(s.tool, s.arguments, CallOutcome(False, "")) for s in scenario.steps]
    full = await score_episode(env, scenario, EpisodeReport(scenario.name, calls=played))
    assert (full.reward, full.r_traj, full.r_state) == (1.0, 1.0, 1.0)
    short_run = await score_episode(env, scenario, EpisodeReport(scenario.name, calls=played[:3]))
    assert short_run.r_state == 0.0 and 0 < short_run.r_traj < 1
    assert short_run.reward == pytest.approx(0.5 * short_run.r_traj)


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
    assert "no scenario 'no-such-scenario'" in proc.stderr
