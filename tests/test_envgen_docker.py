"""EnvGen for real: the stand-in model writes drafts with each class of defect, and every revision is run in a
container sandbox, built into an image and validated until the fixes pass; generated code never runs on the
host; a hang the sandbox's own time limits cannot stop ends the sandbox, not the loop; the budget ends a run
that does not converge; `envreg scenario record` records a generated folder in a sandbox."""

from __future__ import annotations

import json
import secrets
import socket
import subprocess
import threading
from pathlib import Path

import anyio
import pytest
from conftest import FIXTURES, scaled
from test_sandboxing import base_image  # noqa: F401  (the sandboxes' image, built once)
from typer.testing import CliRunner
from validate_helpers import npm_cached_home

from envreg.cli.main import app
from envreg.env.loader import load_environment
from envreg.envgen.draft import Draft, write_files
from envreg.envgen.loop import Options, generate, prompt_spec
from envreg.envgen.spec import read_input
from envreg.errors import ForeignCode
from envreg.standin import StandInLLM, text
from envreg.standin.envgen import EnvGenScript
from envreg.standin.envgen import write_files as standin_files

pytestmark = [pytest.mark.docker]
runner = CliRunner()
PARKING = FIXTURES / "envgen" / "parking.json"  # 4 tools: a small image to build and validate
CAUGHT_BY = {
    "syntax": "envgen.import",
    "schema": "envgen.metadata",
    "hang": "envgen.hang",
    "scenario": "scenarios.results",
    "uuid": "state.determinism",
    "journal": "state.transactional",
}


@pytest.fixture
def name(base_image: str) -> str:  # noqa: F811
    """A name no other test (or worker) builds; the images built under it are removed afterwards."""
    name = f"envgen-test-{secrets.token_hex(4)}"
    yield name
    ids = subprocess.run(
        ["docker", "images", "-q", "--filter", f"label=io.envreg.name={name}"], capture_output=True, text=True
    ).stdout.split()
    if ids:
        subprocess.run(["docker", "image", "rm", "-f", *sorted(set(ids))], capture_output=True)


@pytest.fixture
def home(envreg_home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This test's ENVREG_HOME, with the checkout's npm cache (the TypeScript validators install once)."""
    path = npm_cached_home(envreg_home / "with-npm")
    monkeypatch.setenv("ENVREG_HOME", str(path))
    return path


@pytest.fixture
def llm_config():
    pytest.importorskip("openai", reason="the LLM client is the openai SDK (envreg's synth extra)")
    from envreg.synth.llm import LLMConfig

    return lambda url: LLMConfig(url, "standin")


class Listener:
    """A TCP server on the host's loopback that counts the connections it gets."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            conn.close()


def answering(files: dict) -> object:
    """A policy that answers every request with the same draft."""
    return lambda body: text(json.dumps({"files": files, "notes": "fixed answer"}))


@pytest.mark.slow
def test_the_revise_loop_fixes_each_class_of_defect(
    name: str, home: Path, tmp_path: Path, llm_config
) -> None:
    defects = scaled(list(CAUGHT_BY), ["syntax", "hang", "journal"])
    out = tmp_path / "out"
    with StandInLLM(EnvGenScript(defects)) as llm:
        result = runner.invoke(
            app,
            [
                "envgen",
                str(PARKING),
                "--name",
                name,
                "--out",
                str(out),
                "--llm-base-url",
                llm.base_url,
                "--model",
                "standin",
                "--revisions",
                str(len(defects) + 1),
                "--call-timeout",
                "3",
                "--json",
            ],
        )
    assert result.exit_code == 0, result.output
    log = json.loads(result.output[result.output.index("{\n") :])
    assert log == json.loads((out / "envgen.json").read_text())
    revisions = log["revisions"]
    assert log["passed"] and len(revisions) == len(defects) + 1 and revisions[-1]["passed"]
    for revision, defect in zip(revisions, defects, strict=False):
        assert CAUGHT_BY[defect] in revision["failed_checks"], (defect, revision["failures"])
        assert revision["built"] is (
            defect not in ("syntax", "hang")
        )  # what does not import or hangs is not built
        assert (out / "revisions" / f"{revision['revision']:02d}" / "report.json").is_file()
        if revision["built"]:
            validated = json.loads(
                (out / "revisions" / f"{revision['revision']:02d}" / "validate.json").read_text()
            )
            assert validated["passed"] is False and validated["image_id"] == revision["image_id"]
    # the structured report the model got names the check, the tool and where
    journal = next(r for r, d in zip(revisions, defects, strict=False) if d == "journal")
    (dirty,) = [f for f in journal["failures"] if f["check"] == "state.transactional" and "step" in f]
    assert dirty["scenario"] == "refusals" and dirty["tool"] and "(before)" in dirty["expected"]
    hang = next(r for r, d in zip(revisions, defects, strict=False) if d == "hang")
    stuck = next(f for f in hang["failures"] if f["check"] == "envgen.hang")
    assert (
        "did not return within 3 s" in stuck["message"] and "while len(state.history)" in stuck["traceback"]
    )

    folder = out / name
    assert json.loads((folder / "foreign.json").read_text())["kind"] == "envgen"
    scenario = json.loads((folder / "scenarios" / "every_tool.json").read_text())
    assert scenario["final_state"]["id_counters"] == {
        "rec": 3
    }  # recorded in the sandbox: buy_permit drew one
    manifest = json.loads((out / "manifests" / f"{name}.json").read_text())
    assert manifest["digests"]["manifest"] == revisions[-1]["manifest_digest"]
    with pytest.raises(ForeignCode):
        load_environment(folder)  # generated code: refused on the host
    # the folder is what the image was built from, and the image passes as a user would check it
    checked = runner.invoke(app, ["validate", str(folder), "--json"])
    assert checked.exit_code == 0, checked.output
    assert json.loads(checked.output)["environments"][0]["image_id"] == revisions[-1]["image_id"]


def test_generated_code_never_runs_on_the_host(name: str, home: Path, tmp_path: Path, llm_config) -> None:
    marker = tmp_path / "ran-on-the-host"
    listener = Listener()
    spec = read_input(PARKING, name=name)
    files = standin_files(prompt_spec(spec))
    files["env.py"] += (  # what the module does when imported
        "\nimport socket\n"
        f"try:\n    open({str(marker)!r}, 'w').write('x')\nexcept OSError:\n    pass\n"
        f"try:\n    socket.create_connection(('127.0.0.1', {listener.port}), timeout=2)\n"
        "except OSError as exc:\n    raise RuntimeError(f'no network: {exc}') from None\n"
    )
    with StandInLLM(answering(files)) as llm:
        result = anyio.run(
            generate, spec, llm_config(llm.base_url), Options(out=tmp_path / "out", revisions=1)
        )
    (revision,) = result.revisions
    assert not marker.exists() and listener.connections == 0
    (failure,) = revision.failures
    assert failure.check == "envgen.import" and "no network" in failure.message
    assert not revision.built and result.folder is None
    draft = tmp_path / "out" / "revisions" / "01" / "draft"
    with pytest.raises(ForeignCode):
        load_environment(draft)  # the model's files as written are marked too
    assert not marker.exists()


def test_a_hang_its_time_limit_cannot_stop_ends_the_sandbox_not_the_loop(
    name: str, home: Path, tmp_path: Path, llm_config
) -> None:
    spec = read_input(PARKING, name=name)
    files = standin_files(prompt_spec(spec))
    files["env.py"] = "import signal\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\nwhile True:\n    pass\n"
    options = Options(out=tmp_path / "out", revisions=1, call_timeout=1, sandbox_timeout=15)
    with StandInLLM(answering(files)) as llm:
        result = anyio.run(generate, spec, llm_config(llm.base_url), options)
    (failure,) = result.revisions[0].failures
    assert (
        failure.check == "envgen.hang" and "ran past 15 s in its sandbox and was stopped" in failure.message
    )
    assert not result.passed and not result.revisions[0].built


def test_a_run_that_does_not_converge_stops_at_its_budget(name: str, home: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    pytest.importorskip("openai", reason="the LLM client is the openai SDK (envreg's synth extra)")
    with StandInLLM(EnvGenScript(["syntax", "syntax", "syntax"])) as llm:
        result = runner.invoke(
            app,
            [
                "envgen",
                str(PARKING),
                "--name",
                name,
                "--out",
                str(out),
                "--llm-base-url",
                llm.base_url,
                "--model",
                "standin",
                "--revisions",
                "2",
            ],
        )
    assert result.exit_code == 1
    assert f"{name}: no revision passed within 2" in result.output and "report.json" in result.output
    log = json.loads((out / "envgen.json").read_text())
    assert not log["passed"] and [r["failed_checks"] for r in log["revisions"]] == [["envgen.import"]] * 2
    assert log["folder"] is None and not (out / name).exists()  # nothing was built: no environment folder
    again = runner.invoke(
        app,
        [
            "envgen",
            str(PARKING),
            "--name",
            name,
            "--out",
            str(out),
            "--llm-base-url",
            llm.base_url,
            "--model",
            "standin",
        ],
    )
    assert again.exit_code == 1 and "already holds a run" in again.output and "--force" in again.output


def test_scenario_record_runs_a_generated_folder_in_a_sandbox(name: str, tmp_path: Path) -> None:
    spec = read_input(PARKING, name=name)
    files = standin_files(prompt_spec(spec))
    marker = tmp_path / "ran-on-the-host"
    files["env.py"] += (
        "\n\n@env.tool\ndef touch(state: ParkingPermitsState) -> str:\n"
        '    """Write a file on the host."""\n'
        f"    open({str(marker)!r}, 'w').write('x')\n    return 'done'\n"
    )
    folder = tmp_path / name
    write_files(folder, Draft.parse({"files": files}).folder_files())
    recorded = runner.invoke(app, ["scenario", "record", str(folder)])
    assert recorded.exit_code == 0, recorded.output
    assert "final_state" in json.loads((folder / "scenarios" / "every_tool.json").read_text())
    (folder / "scenarios" / "touch.json").write_text(
        json.dumps({"name": "touch", "steps": [{"tool": "touch"}]})
    )
    refused = runner.invoke(app, ["scenario", "record", str(folder), "touch"])
    assert refused.exit_code == 1 and "touch, step 1 (touch): the call failed" in refused.output
    assert not marker.exists()


def test_a_module_that_rewrites_the_sandboxs_answer_cannot_write_outside_its_folder(
    name: str, home: Path, tmp_path: Path, llm_config
) -> None:
    spec = read_input(PARKING, name=name)
    files = standin_files(prompt_spec(spec))
    files["env.py"] += (
        "\nimport envreg.envgen.inspect as _inspect\n_relative = _inspect._relative\n"
        "def _rewritten(answer, folder):\n    answer = _relative(answer, folder)\n"
        "    answer['recorded']['../../../escaped.json'] = '{}'\n    return answer\n"
        "_inspect._relative = _rewritten\n"
    )
    with StandInLLM(answering(files)) as llm:
        result = anyio.run(
            generate, spec, llm_config(llm.base_url), Options(out=tmp_path / "out", revisions=1)
        )
    (failure,) = result.revisions[0].failures
    assert (
        failure.check == "envgen.import"
        and "records files the draft does not have: ../../../escaped.json" in failure.message
    )
    assert not result.revisions[0].built
    assert not list(tmp_path.rglob("escaped.json"))
