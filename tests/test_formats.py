"""The committed JSON Schemas and OpenAPI documents (`schemas/`) are the code's, and the files envreg writes
and reads validate against them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest

from envreg import schemas
from envreg.registry.lockfile import LockEntry, Lockfile

ROOT = Path(__file__).resolve().parent.parent
COMMITTED = ROOT / "schemas"


def _locked(name: str) -> str | None:
    match = re.search(rf"^{name}==(\S+)", (ROOT / "requirements.lock").read_text(), re.M)
    return match[1] if match else None


def test_the_committed_documents_are_the_codes() -> None:
    from importlib.metadata import version

    moved = {n: version(n) for n in ("pydantic", "fastapi") if version(n) != _locked(n)}
    if moved:  # the lowest-versions job: schema generation differs between releases of pydantic / FastAPI
        pytest.skip(f"the committed documents are generated with the locked versions; here {moved}")
    assert schemas.stale(COMMITTED) == [], "run `envreg schema --write schemas` and commit the result"
    assert {p.name for p in COMMITTED.glob("*.json")} == {schemas.file_name(n) for n in schemas.SCHEMAS}


def _schema(name: str) -> jsonschema.protocols.Validator:
    document = json.loads((COMMITTED / schemas.file_name(name)).read_text())
    jsonschema.Draft202012Validator.check_schema(document)
    return jsonschema.Draft202012Validator(document)


def test_every_committed_manifest_validates() -> None:
    validator = _schema("manifest")
    paths = sorted((ROOT / "manifests").glob("*.json"))
    assert paths
    for path in paths:
        validator.validate(json.loads(path.read_text()))


def test_every_scenario_and_rejected_state_validates() -> None:
    scenario, rejected = _schema("scenario"), _schema("rejected-state")
    count = 0
    for path in sorted((ROOT / "images").glob("*/scenarios/*.json")):
        scenario.validate(json.loads(path.read_text()))
        count += 1
    for path in sorted((ROOT / "images").glob("*/scenarios/rejected/*.json")):
        rejected.validate(json.loads(path.read_text()))
    assert count > 100


def test_a_lockfile_validates_and_a_wrong_one_does_not() -> None:
    validator = _schema("lock")
    entry = LockEntry(
        "calendar",
        "1.0.0",
        "sha256:" + "1" * 64,
        "sha256:" + "2" * 64,
        "127.0.0.1:5000/envreg/calendar",
        "sha256:" + "3" * 64,
    )
    validator.validate(
        json.loads(
            Lockfile([entry, LockEntry("bank", "1.0.0", "sha256:" + "4" * 64, "sha256:" + "5" * 64)]).dumps()
        )
    )
    with pytest.raises(jsonschema.ValidationError):
        validator.validate(
            {
                "lock_version": 1,
                "environments": [
                    {"name": "x", "version": "1", "image_id": "nope", "manifest_digest": "sha256:" + "0" * 64}
                ],
            }
        )


def test_a_trajectory_record_validates() -> None:
    """A record as `envreg synth run` writes it (a calendar scenario's calls, executed) validates; one without
    its final states does not."""
    from envreg.canonical import canonical_json, sha256_hex
    from envreg.env import load_environment, load_scenarios
    from envreg.synth.records import EnvRef, ExecutedCall, Trajectory, Turn

    env = load_environment(ROOT / "images" / "calendar")
    scenario = next(s for s in load_scenarios(env.folder)[0] if s.initial_state)
    instance = env.instance(scenario.initial_state)
    calls = []
    for step in scenario.steps:
        outcome = instance.call_tool(step.tool, step.arguments)
        calls.append(
            ExecutedCall(
                env="calendar",
                tool=step.tool,
                arguments=step.arguments,
                result=outcome.text,
                is_error=outcome.is_error,
            )
        )
    final = instance.state.to_json()
    record = Trajectory(
        id="t0", seed=0, query_source="template",
        envs=[EnvRef(name="calendar", version=env.version, manifest_digest="sha256:" + "0" * 64)],
        initial_states={"calendar": scenario.initial_state},
        initial_state_sha256={"calendar": sha256_hex(canonical_json(scenario.initial_state))},
        turns=[Turn(query="do it", calls=calls)],
        final_states={"calendar": final},
        final_state_sha256={"calendar": sha256_hex(canonical_json(final))},
    )  # fmt: skip
    validator = _schema("trajectory")
    data = json.loads(record.model_dump_json())
    validator.validate(data)
    del data["final_states"]
    with pytest.raises(jsonschema.ValidationError):
        validator.validate(data)


def test_the_schema_command_prints_and_checks(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from envreg.cli.main import app

    shown = CliRunner().invoke(app, ["schema", "lock"])
    assert shown.exit_code == 0 and json.loads(shown.output)["title"] == "envreg lockfile"
    assert CliRunner().invoke(app, ["schema", "--write", str(tmp_path)]).exit_code == 0
    assert CliRunner().invoke(app, ["schema", "--check", str(tmp_path)]).exit_code == 0
    (tmp_path / "lock.schema.json").write_text("{}\n")
    stale = CliRunner().invoke(app, ["schema", "--check", str(tmp_path)])
    assert stale.exit_code == 1 and "lock" in stale.output and "hint:" in stale.output


def test_readme_figures_are_the_saved_bench_output(tmp_path: Path) -> None:
    import shutil
    import subprocess

    script = ROOT / "scripts" / "readme-figures"
    assert subprocess.run([str(script), "--check"], capture_output=True, timeout=60).returncode == 0
    copy = tmp_path / "repo"
    (copy / "scripts").mkdir(parents=True)
    (copy / "bench" / "figures").mkdir(parents=True)
    shutil.copy(script, copy / "scripts")
    for figures in (ROOT / "bench" / "figures").glob("*.md"):
        shutil.copy(figures, copy / "bench" / "figures")
    readme = (ROOT / "README.md").read_text()
    (copy / "README.md").write_text(readme.replace("| wall time |", "| wall time (edited by hand) |", 1))
    stale = subprocess.run(
        [str(copy / "scripts" / "readme-figures"), "--check"], capture_output=True, text=True, timeout=60
    )
    assert stale.returncode == 1 and "error:" in stale.stderr and "hint:" in stale.stderr
    assert subprocess.run([str(copy / "scripts" / "readme-figures")], timeout=60).returncode == 0
    assert (copy / "README.md").read_text() == readme
