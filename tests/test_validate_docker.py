"""`envreg validate` against real images: the deliberately broken environments of tests/fixtures/broken, built
here with `envreg build`, are each caught by the right check with a message naming the tool or field; the
reference environments pass every check (through the CLI, with its JSON and JUnit reports)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import anyio
import pytest
from conftest import FIXTURES, ROOT
from validate_helpers import NPM_CACHE, npm_cached_home

from envreg.validate import EnvReport, Status, validate
from envreg.validate.ts import SchemaWorker

pytestmark = [pytest.mark.docker]

BROKEN = FIXTURES / "broken"
ENVREG = [sys.executable, "-m", "envreg.cli.main"]

# folder -> {check that must fail: words its evidence must contain}; no other check may fail
CASES: dict[str, dict[str, list[str]]] = {
    "drift": {
        "manifest.tools": [
            "tool 'dump_notes' is served but not in the manifest",
            "protocol 2026-07-28",
            "protocol 2025-11-25",
        ],
        "manifest.restart": ["container 2", "tool 'dump_notes' is served but not in the manifest"],
    },
    "uuid": {"state.determinism": ["scenario add_two, step 1 (add_note): the result differs"]},
    "clock": {"state.determinism": ["scenario log_twice, step 1 (log): the state differs: entries.0.at"]},
    "dirty_raise": {
        "state.transactional": [
            "scenario tag_a_missing_note, step 1 (tag_note): the call failed (no note 'note_0042') but changed the state: tags.0"
        ]
    },
    "network": {
        "sandbox.no_network": [
            "tool 'convert' (scenario convert, step 1) opened network traffic: Tcp.ActiveOpens +1"
        ]
    },
    "dump": {"state.roundtrip": ["state seed: its dump does not load back", "notes.note_0001.created"]},
    "output": {
        "schemas.output": [
            "tool 'add_reminder' (scenario remind, step 1): due: '2026-01-05T09:30:00' is not a 'date-time'"
        ],
        "schemas.ts_clients": [
            "tool 'add_reminder': result refused by v1/v2 (scenario remind, step 1)",
            'must match format "date-time"',
        ],
    },
    "global": {
        "state.snapshot_restore": [
            "scenario three_notes, step 2 (add_note), after restoring the snapshot taken after step 1: the result differs"
        ]
    },
    "slow": {"budgets.latency": ["over the budget of 50 ms; slowest: get_value"]},
}


@pytest.fixture(scope="module")
def broken_images(reference_images, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Build every broken environment into an image, as a user's CI would (`envreg build` from the folder)."""
    manifests = tmp_path_factory.mktemp("broken-manifests")
    proc = subprocess.run(
        [
            *ENVREG,
            "build",
            "--force",
            "--images-dir",
            str(BROKEN),
            "--manifests-dir",
            str(manifests),
            "--json",
            *CASES,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert proc.returncode == 0, f"envreg build failed:\n{proc.stdout}\n{proc.stderr}"


@pytest.fixture(scope="module")
def broken_reports(broken_images) -> dict[str, EnvReport]:
    async def run() -> list[EnvReport]:
        async with SchemaWorker(NPM_CACHE) as worker:
            return await validate([str(BROKEN / case) for case in CASES], jobs=2, worker=worker)

    return dict(zip(CASES, anyio.run(run), strict=True))


@pytest.mark.parametrize("case", CASES)
def test_broken_environment_is_caught_by_the_right_check(
    case: str, broken_reports: dict[str, EnvReport]
) -> None:
    report = broken_reports[case]
    assert report.error is None, report.error
    assert not report.passed
    results = {r.name: r for r in report.results}
    failing = {name for name, r in results.items() if r.status is Status.FAIL}
    if "budgets.latency" not in CASES[case]:  # wall-clock p95 over a few calls: a stalled host fails it
        failing.discard("budgets.latency")
    assert failing == set(CASES[case]), {n: (results[n].summary, results[n].evidence) for n in failing}
    for name, words in CASES[case].items():
        text = "\n".join(results[name].evidence)
        for word in words:
            assert word in text, f"{name} does not say {word!r}:\n{text}"


def test_every_check_ran_on_the_broken_environments(broken_reports: dict[str, EnvReport]) -> None:
    """Checks that need a property an environment lacks say so; none errors out."""
    for case, report in broken_reports.items():
        for r in report.results:
            assert not r.summary.startswith("the check could not run"), (case, r.name, r.summary)


def test_reference_environments_pass_every_check(reference_images, tmp_path: Path) -> None:
    """The CLI as CI runs it: folders of the catalog, a JSON report on stdout and a JUnit file."""
    junit = tmp_path / "validate.xml"
    home = npm_cached_home(tmp_path / "home")
    proc = subprocess.run(
        [*ENVREG, "validate", "images/calendar", "images/bank", "--json", "--junit", str(junit), "-j", "2"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1200,
        env={**os.environ, "ENVREG_HOME": str(home)},
    )
    report = json.loads(proc.stdout)
    failures = {
        (env["name"], c["name"]): (c["summary"], c["evidence"])
        for env in report["environments"]
        for c in env["checks"]
        if c["status"] == "fail"
    }
    assert proc.returncode == 0 and report["passed"], (failures, proc.stderr[-2000:])
    for env in report["environments"]:
        assert env["error"] is None
        statuses = {c["name"]: c["status"] for c in env["checks"]}
        assert len(statuses) == 23
        assert all(s in ("pass", "skip") for s in statuses.values())
        assert statuses["manifest.image"] == "skip", "a fresh $ENVREG_HOME records no image"
    suites = ET.parse(junit).getroot()
    assert suites.get("failures") == "0" and suites.get("errors") == "0"
    assert int(suites.get("tests", "0")) == 46


def test_cli_exits_1_and_names_what_failed(broken_images, tmp_path: Path) -> None:
    proc = subprocess.run(
        [*ENVREG, "validate", str(BROKEN / "uuid"), "--check", "state"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "ENVREG_HOME": str(npm_cached_home(tmp_path / "home"))},
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "state.determinism" in proc.stdout and "fail" in proc.stdout
    assert "(add_note)" in proc.stdout
    assert "FAILED: broken-uuid:1.0.0" in proc.stdout
    assert "sandbox.non_root" not in proc.stdout  # checks left out by --check are not reported


def test_unknown_image_is_an_error_not_a_crash(docker_engine, tmp_path: Path) -> None:
    reports = anyio.run(lambda: validate(["no-such-environment:9.9.9"], only=["manifest.valid"]))
    assert reports[0].error is not None and "no-such-environment" in reports[0].error
    assert not reports[0].passed


def test_a_folder_changed_after_its_build_is_caught(reference_images, tmp_path: Path) -> None:
    images = tmp_path / "images"
    shutil.copytree(FIXTURES / "ci-repo" / "images", images)
    build = subprocess.run(
        [
            *ENVREG,
            "build",
            "--force",
            "--images-dir",
            str(images),
            "--manifests-dir",
            str(tmp_path / "manifests"),
            "tally",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert build.returncode == 0, build.stderr
    env_py = images / "tally" / "env.py"
    env_py.write_text(env_py.read_text() + "\n# edited after the build\n")

    async def run() -> list[EnvReport]:
        async with SchemaWorker(NPM_CACHE) as worker:
            return await validate([str(images / "tally")], only=["manifest"], worker=worker)

    (report,) = anyio.run(run)
    source = next(r for r in report.results if r.name == "manifest.source")
    assert source.status is Status.FAIL
    assert "env.py was changed" in "\n".join(source.evidence) and "envreg build tally" in "\n".join(
        source.evidence
    )
