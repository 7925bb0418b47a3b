"""Foreign environments in real containers: BFCL replays through the Docker tiers, an imported EnvFactory image."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import FIXTURES, ROOT, scaled
from mcp_helpers import caller, mcp_client

from envreg.adapters import bfcl
from envreg.adapters.bfcl_replay import replay_all
from envreg.env import load_scenarios, states_equal
from envreg.env.scenario import run_steps
from envreg.runtime import Runtime

pytestmark = [pytest.mark.docker, pytest.mark.anyio]
EF = FIXTURES / "envfactory"


def sample(per_category: int) -> list[bfcl.Entry]:
    """The first entries of each category, plus every class at least once."""
    entries = bfcl.load_entries()
    chosen = [e for c in bfcl.CATEGORIES for e in [x for x in entries if x.category == c][:per_category]]
    for class_name in bfcl.CLASSES:
        if not any(class_name in e.classes for e in chosen):
            chosen.append(next(e for e in entries if class_name in e.classes))
    return chosen


@pytest.mark.slow
@pytest.mark.parametrize(
    ("isolation", "recycle"),
    [("container", 0), ("container", 4), ("instance", 0)],
    ids=["container", "container-recycled", "instance"],
)
async def test_bfcl_sample_replays_through_the_docker_tiers_and_agrees(
    reference_images, isolation, recycle
) -> None:
    """Recycled containers serve sandbox after sandbox (one per turn here): BFCL's module-level data,
    which some methods write, must not carry from one to the next."""
    entries = sample(scaled(3, 1))  # and every class at least once
    async with Runtime(recycle=recycle) as rt:
        report = await replay_all(rt, entries, isolation=isolation, restore_each_turn=True, concurrency=4)
    assert len(report.results) == len(entries) >= scaled(12, len(bfcl.CLASSES))
    assert report.disagreements == []
    assert all(r.envreg.valid for r in report.results)
    async with Runtime(recycle=recycle) as rt:
        dropped = await replay_all(rt, entries[:3], isolation=isolation, variant="drop-last")
    assert [r.envreg.valid for r in dropped.results] == [r.bfcl.valid for r in dropped.results] == [False] * 3


@pytest.fixture(scope="module")
def envfactory_images(docker_engine, tmp_path_factory) -> Path:
    """ef-inventory and ef-weather, imported by `envreg import envfactory` and built by `envreg build`."""
    root = tmp_path_factory.mktemp("envfactory")
    images, manifests = root / "images", root / "manifests"

    def envreg(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "envreg.cli.main", *args],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=1500,
        )

    done = envreg(
        "import",
        "envfactory",
        str(EF / "inventory_tools.py"),
        "--metadata",
        str(EF / "inventory_tools.json"),
        "--name",
        "ef-inventory",
        "--seed",
        str(EF / "inventory_seed.json"),
        "--scenarios",
        str(EF / "inventory_scenarios"),
        "--images",
        str(images),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    done = envreg(
        "import",
        "envfactory",
        str(EF / "weather_tools.py"),
        "--metadata",
        str(EF / "weather_tools.json"),
        "--name",
        "ef-weather",
        "--images",
        str(images),
    )
    assert done.returncode == 0, done.stdout + done.stderr  # no scenarios: nothing reached the network yet
    done = envreg(
        "build",
        "--force",  # the test's own images: an earlier run's build of the same version may differ
        "--images-dir",
        str(images),
        "--manifests-dir",
        str(manifests),
        "--progress",
        "plain",
        "ef-inventory",
        "ef-weather",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return images


async def test_envfactory_image_serves_isolated_conversations_over_mcp(envfactory_images) -> None:
    folder = envfactory_images / "ef-inventory"
    assert (folder / "inventory_tools.py").read_bytes() == (EF / "inventory_tools.py").read_bytes()
    scenarios, _ = load_scenarios(folder)
    async with Runtime() as rt:
        first = await rt.sandbox("ef-inventory", isolation="container", state=scenarios[0].initial_state)
        second = await rt.sandbox("ef-inventory", isolation="container", state=scenarios[0].initial_state)
        async with mcp_client(first.mcp_url, "2026-07-28", token=first.token) as client:
            names = [t.name for t in (await client.list_tools()).tools]
            assert names == ["list_items", "add_item", "restock", "place_order"]
            assert await run_steps(scenarios[0], caller(client)) == []
        assert states_equal(await first.state(), scenarios[0].final_state)
        assert await second.state() == scenarios[0].initial_state, "the other conversation kept its own state"
        snap = await first.snapshot()
        fork = (await rt.fork(snap, 1, isolation="instance"))[0]
        assert await fork.state() == await first.state()


async def test_a_network_call_in_a_container_is_blocked_and_rolled_back(envfactory_images) -> None:
    async with Runtime() as rt:
        sb = await rt.sandbox(
            "ef-weather", isolation="container", state={"scenario": {"readings": {"Oslo": 3.5}}}
        )
        result = await sb.call_tool("fetch_forecast", {"city": "Lima"})
        assert result.is_error and "network call blocked" in result.error, result.error
        assert await sb.state() == {"scenario": {"readings": {"Oslo": 3.5}}}, json.dumps(await sb.state())
