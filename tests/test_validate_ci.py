"""The example CI workflow for users' environment repositories (examples/ci/environments.yml), run for real: its
Build, Validate and Push steps, verbatim, on a miniature user repository, against a local OCI registry."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import docker
import pytest
import yaml
from conftest import FIXTURES, ROOT
from validate_helpers import npm_cached_home

from envreg.config import image_prefix

pytestmark = [pytest.mark.docker]

WORKFLOW = ROOT / "examples" / "ci" / "environments.yml"


def steps() -> dict[str, dict]:
    workflow = yaml.safe_load(WORKFLOW.read_text())
    return {s["name"]: s for s in workflow["jobs"]["environments"]["steps"] if "name" in s}


def test_workflow_is_well_formed() -> None:
    workflow = yaml.safe_load(WORKFLOW.read_text())
    found = steps()
    assert {"Install envreg", "Build", "Validate", "Validation report", "Push by digest", "Lockfile"} <= set(
        found
    )
    assert "github.ref == 'refs/heads/main'" in found["Push by digest"]["if"]
    assert found["Validation report"]["if"] == "always()"
    assert workflow["jobs"]["environments"]["permissions"]["packages"] == "write"


def test_workflow_builds_validates_and_pushes_by_digest(reference_images, tmp_path: Path) -> None:
    from envreg.registry.testing import LocalRegistry

    repo = tmp_path / "repo"
    shutil.copytree(FIXTURES / "ci-repo", repo)
    envreg = [sys.executable, "-m", "envreg.cli.main"]
    env = {
        **os.environ,
        "ENVREG": " ".join(envreg),  # what the Install step puts in $GITHUB_ENV, without sudo
        "ENVREG_ROOT": str(ROOT),
        "ENVREG_HOME": str(npm_cached_home(tmp_path / "home")),
        "ENVREG_IMAGES": str(repo / "images"),
        "NAMESPACE": "Some-Org",
        "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md"),
    }
    # a fresh runner's engine: no tag left by another build of the fixture (an older envreg's manifest)
    with contextlib.suppress(docker.errors.ImageNotFound):
        docker.from_env().images.remove(f"{image_prefix()}tally:1.0.0", noprune=True)
    # the user's committed manifests
    subprocess.run(
        [*envreg, "manifest", "--out", "manifests"], cwd=repo, env=env, check=True, capture_output=True
    )
    with LocalRegistry(tmp_path / "registry") as registry:
        env["REGISTRY"] = registry.address
        for name in ("Build", "Validate", "Push by digest"):
            proc = subprocess.run(
                ["bash", "-e", "-c", steps()[name]["run"]],
                cwd=repo,
                env=env,
                capture_output=True,
                text=True,
                timeout=1200,
            )
            assert proc.returncode == 0, (
                f"step {name!r} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
            )

        report = json.loads((repo / "validate.json").read_text())
        assert report["passed"], report
        (tally,) = report["environments"]
        assert tally["name"] == "tally" and tally["counts"]["fail"] == 0
        assert ET.parse(repo / "validate.xml").getroot().get("failures") == "0"

        lock = json.loads((repo / "envreg.lock").read_text())
        (pinned,) = lock["environments"]
        assert pinned["name"] == "tally" and pinned["image_id"] == tally["image_id"]
        assert pinned["repository"].endswith("some-org/tally") and pinned["repo_digest"].startswith("sha256:")
        summary = (tmp_path / "summary.md").read_text()
        assert f"`{tally['image_id']}`" in summary and pinned["repo_digest"] in summary

        # anyone can now install exactly that image by digest
        fresh = {**env, "ENVREG_HOME": str(tmp_path / "elsewhere")}
        pulled = subprocess.run(
            [*envreg, "pull", "--locked", "--lockfile", str(repo / "envreg.lock"), "--json"],
            env=fresh,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert pulled.returncode == 0, pulled.stderr
        assert json.loads(pulled.stdout)[0]["image_id"] == tally["image_id"]
