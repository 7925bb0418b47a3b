"""Manifests are generated from code, digest-stable, and `--check` catches a stale one."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import REFERENCE_ENVS, ROOT
from typer.testing import CliRunner

from envreg.cli.main import app
from envreg.env import load_environment
from envreg.manifest import Manifest, build_manifest, check_manifest

runner = CliRunner()


@pytest.mark.parametrize("name", REFERENCE_ENVS)
def test_committed_manifests_are_current(name: str) -> None:
    env = load_environment(name)
    assert check_manifest(env, ROOT / "manifests") is None


@pytest.mark.parametrize("name", REFERENCE_ENVS)
def test_manifest_content(name: str) -> None:
    env = load_environment(name)
    manifest = build_manifest(env)
    manifest.verify()
    assert manifest.name == name and manifest.version == env.version
    assert [t.name for t in manifest.tools] == list(env.tools)
    assert manifest.scenarios >= 4 and manifest.rejected_states >= 2
    assert manifest.runtime.user == "65534:65534" and manifest.runtime.network == "none"
    assert manifest.digests.manifest.startswith("sha256:")
    assert build_manifest(env).dumps() == manifest.dumps(), "generation is deterministic"


def copy_env(tmp_path: Path, name: str = "counter") -> Path:
    src = ROOT / "tests" / "fixtures" / name
    dst = tmp_path / "images" / name
    shutil.copytree(src, dst)
    return dst


def test_check_names_the_stale_environment_and_write_fixes_it(tmp_path: Path) -> None:
    folder = copy_env(tmp_path)
    out = tmp_path / "manifests"
    result = runner.invoke(app, ["manifest", str(folder), "--check", "--out", str(out)])
    assert result.exit_code == 1 and "counter" in result.output and "missing" in result.output
    result = runner.invoke(app, ["manifest", str(folder), "--out", str(out)])
    assert result.exit_code == 0, result.output
    first = Manifest.loads((out / "counter.json").read_text())
    assert runner.invoke(app, ["manifest", str(folder), "--check", "--out", str(out)]).exit_code == 0

    # a changed tool interface changes the tools digest and the manifest digest; --check says so
    source = (folder / "env.py").read_text().replace("by: int = 1", "by: int = 2")
    (folder / "env.py").write_text(source)
    from envreg.env.loader import _load

    _load.cache_clear()
    result = runner.invoke(app, ["manifest", str(folder), "--check", "--out", str(out)])
    assert result.exit_code == 1
    assert "counter" in result.output and "tools changed" in result.output
    runner.invoke(app, ["manifest", str(folder), "--out", str(out)])
    second = Manifest.loads((out / "counter.json").read_text())
    assert second.digests.tools != first.digests.tools
    assert second.digests.manifest != first.digests.manifest
    assert second.digests.state_schema == first.digests.state_schema


def test_a_tampered_manifest_fails_verification(tmp_path: Path) -> None:
    manifest = build_manifest(load_environment("bank"))
    data = json.loads(manifest.dumps())
    data["tools"][0]["description"] = "something else"
    with pytest.raises(ValueError, match="does not match its content"):
        Manifest.model_validate(data).verify()
