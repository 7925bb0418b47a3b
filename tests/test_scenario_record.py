"""`envreg scenario record`: a scenario's calls played on the local tier, their results and final state written
into its file; refusals write nothing. The environment is the notes example EnvGen shows models
(`envreg.envgen.prompts.EXAMPLE_ENV`), so this also proves that example works."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from envreg.cli.main import app
from envreg.env import Scenario
from envreg.env.loader import load_environment
from envreg.env.record import id_counter_problems, record, scenario_text
from envreg.envgen.prompts import EXAMPLE_ENV, EXAMPLE_REJECTED, EXAMPLE_SCENARIO, EXAMPLE_SEED

runner = CliRunner()

HANGS = '''
@env.tool(read_only=True)
def wait_for_note(state: NotesState, note_id: str) -> Note:
    """Wait until a note exists.

    Args:
        note_id: The note.
    """
    while note_id not in state.notes:
        pass
    return state.notes[note_id]
'''


def write_env(folder: Path, *, extra: str = "") -> Path:
    folder.mkdir(parents=True)
    (folder / "env.py").write_text(EXAMPLE_ENV + extra)
    (folder / "seed.json").write_text(json.dumps(EXAMPLE_SEED, indent=2) + "\n")
    (folder / "scenarios" / "rejected").mkdir(parents=True)
    (folder / "scenarios" / "add_then_archive.json").write_text(json.dumps(EXAMPLE_SCENARIO, indent=2) + "\n")
    (folder / "scenarios" / "rejected" / "counter_behind_ids.json").write_text(
        json.dumps(EXAMPLE_REJECTED) + "\n"
    )
    return folder


@pytest.fixture
def notes(tmp_path: Path) -> Path:
    return write_env(tmp_path / "notes")


def scenario(*steps: dict, **fields) -> Scenario:
    return Scenario.model_validate({"name": "s", "steps": list(steps), **fields})


def test_the_prompt_example_records_with_its_predictions_and_refuses_its_rejected_state(notes: Path) -> None:
    env = load_environment(notes)
    recording = record(env, Scenario.model_validate(EXAMPLE_SCENARIO), check=True)
    assert recording.ok, recording.problems
    steps = recording.scenario.steps
    assert [n["id"] for n in steps[1].expect] == ["note_0001", "note_0003"]
    assert steps[2].expect["archived"] is True
    assert recording.scenario.final_state["notes"]["note_0003"]["archived"] is True
    assert recording.scenario.final_state["id_counters"] == {"note": 3}
    with pytest.raises(ValueError, match=EXAMPLE_REJECTED["error"]):
        env.parse_state(EXAMPLE_REJECTED["state"])


def test_recording_writes_results_and_final_state_and_is_stable(notes: Path) -> None:
    env = load_environment(notes)
    given = scenario(
        {"tool": "add_note", "arguments": {"text": "Pay rent", "author": "sam@home.example"}},
        {"tool": "list_notes", "arguments": {}},
        {"tool": "archive_note", "arguments": {"note_id": "note_0099"}, "expect_error": ""},
    )
    first = record(env, given)
    assert first.ok
    assert first.scenario.steps[0].expect["id"] == "note_0003"
    assert first.scenario.steps[2].expect_error.startswith(
        "no note 'note_0099'"
    )  # "" records the whole message
    again = record(env, first.scenario, check=True)
    assert again.ok and scenario_text(again.scenario) == scenario_text(first.scenario)
    text = scenario_text(first.scenario)
    assert list(json.loads(text)) == ["name", "steps", "final_state"] and text.endswith("}\n")


def test_a_final_state_stated_by_its_sha256_is_checked_and_kept_that_way(notes: Path) -> None:
    """`final_state_sha256` (for states too big to commit): recording keeps the digest form, a wrong digest is
    a final_state problem, and the digest is the canonical one of the state without its volatile paths."""
    from envreg.env.scenario import state_digest

    env = load_environment(notes)
    add = {"tool": "add_note", "arguments": {"text": "Pay rent", "author": "sam@home.example"}}
    full = record(env, scenario(add)).scenario
    digest = state_digest(full.final_state, env.volatile)
    given = scenario(add, final_state_sha256=digest)
    again = record(env, given, check=True)
    assert again.ok, again.problems
    assert again.scenario.final_state is None and again.scenario.final_state_sha256 == digest
    assert list(json.loads(scenario_text(again.scenario))) == ["name", "steps", "final_state_sha256"]
    wrong = record(env, scenario(add, final_state_sha256="0" * 64), check=True)
    assert [p.kind for p in wrong.problems] == ["final_state"]
    assert f"sha256 is {digest}, expected {'0' * 64}" in wrong.problems[0].message
    with pytest.raises(ValueError, match="final_state_sha256"):
        scenario(add, final_state_sha256="not-a-digest")


def test_validate_compares_a_final_state_by_its_sha256() -> None:
    """`envreg validate`'s final-state check on a scenario that states only the digest (volatile paths out)."""
    from envreg.env.scenario import state_digest
    from envreg.validate.runs import ScenarioRun

    final = {"notes": {"note_0001": {"text": "x"}}, "clock": "12:00"}
    digest = state_digest(final, ["clock"])
    run = ScenarioRun(scenario(final_state_sha256=digest), initial=final)
    assert run.final_problem(["clock"]) is None
    assert run.final_problem([]) == (
        f"scenario s: final state's sha256 is {state_digest(final)}, expected {digest}"
    )


def test_calls_that_go_wrong_are_each_a_problem(notes: Path) -> None:
    env = load_environment(notes)
    recording = record(
        env,
        scenario(
            {"tool": "archive_note", "arguments": {"note_id": "note_0042"}},
            {"tool": "list_notes", "arguments": {}, "expect_error": "nope"},
            {
                "tool": "archive_note",
                "arguments": {"note_id": "note_0042"},
                "expect_error": "already archived",
            },
            {"tool": "delete_everything", "arguments": {}},
            {"tool": "add_note", "arguments": {"text": "x", "author": "not an email"}},
        ),
    )
    kinds = [(p.step, p.kind) for p in recording.problems]
    assert kinds == [
        (1, "unexpected_error"),
        (2, "succeeded"),
        (3, "error_text"),
        (4, "unknown_tool"),
        (5, "unexpected_error"),
    ]
    assert "no note 'note_0042'" in recording.problems[0].message
    assert "author" in recording.problems[4].message


def test_with_check_a_wrong_prediction_is_reported_and_kept(notes: Path) -> None:
    env = load_environment(notes)
    wrong = {
        "id": "note_0001",
        "text": "Pay rent",
        "author": "sam@home.example",
        "tags": [],
        "archived": False,
    }
    recording = record(
        env,
        scenario(
            {
                "tool": "add_note",
                "arguments": {"text": "Pay rent", "author": "sam@home.example"},
                "expect": wrong,
            },
            final_state={**EXAMPLE_SEED},
        ),
        check=True,
    )
    mismatch, final = recording.problems
    assert mismatch.kind == "mismatch" and mismatch.expected == wrong and mismatch.got["id"] == "note_0003"
    assert recording.scenario.steps[0].expect == wrong  # the prediction stays for the image to be judged by
    assert final.kind == "final_state" and "notes.note_0003" in final.message
    assert record(
        env,
        scenario({"tool": "add_note", "arguments": {"text": "a", "author": "a@b.example"}, "expect": wrong}),
    ).ok


def test_an_initial_state_whose_ids_outrun_its_counter_is_refused(notes: Path) -> None:
    env = load_environment(notes)
    state = json.loads(json.dumps(EXAMPLE_SEED))
    state["id_counters"] = {"note": 2}
    state["notes"]["note_0005"] = {**state["notes"]["note_0002"], "id": "note_0005"}
    # the state model's own validator refuses it at load...
    assert (
        record(env, scenario({"tool": "list_notes", "arguments": {}}, initial_state=state)).problems[0].kind
        == "initial_state"
    )
    # ...and where a model has none, the recorder still sees the collision the calls would make
    problems = id_counter_problems(state, {**state, "id_counters": {"note": 3}})
    assert problems and "note_0005" in problems[0] and "at least 5" in problems[0]
    assert id_counter_problems(state, state) == []  # no id drawn: nothing can collide


def test_a_call_that_hangs_is_stopped_and_reported_with_where_it_was(tmp_path: Path) -> None:
    env = load_environment(write_env(tmp_path / "hangs", extra=HANGS))
    recording = record(
        env,
        scenario(
            {"tool": "list_notes", "arguments": {}},
            {"tool": "wait_for_note", "arguments": {"note_id": "note_0042"}},
        ),
        call_timeout=0.5,
    )
    (problem,) = recording.problems
    assert problem.kind == "timeout" and problem.step == 2 and problem.tool == "wait_for_note"
    assert "while note_id not in state.notes" in problem.traceback and "env.py" in problem.traceback


def test_cli_records_checks_and_refuses_without_writing(notes: Path) -> None:
    path = notes / "scenarios" / "add_then_archive.json"
    before = path.read_text()
    stale = runner.invoke(app, ["scenario", "record", str(notes), "--check"])
    assert stale.exit_code == 1 and "add_then_archive.json" in stale.output and path.read_text() == before
    done = runner.invoke(app, ["scenario", "record", str(notes)])
    assert done.exit_code == 0, done.output
    assert "recorded" in done.output and json.loads(path.read_text())["final_state"]["id_counters"] == {
        "note": 3
    }
    assert runner.invoke(app, ["scenario", "record", str(notes), "--check"]).exit_code == 0

    bad = notes / "scenarios" / "bad.json"
    bad.write_text(
        json.dumps({"name": "bad", "steps": [{"tool": "archive_note", "arguments": {"note_id": "x"}}]})
    )
    recorded = path.read_text()
    refused = runner.invoke(app, ["scenario", "record", str(notes)])
    assert refused.exit_code == 1
    assert "bad, step 1 (archive_note): the call failed: no note 'x'" in refused.output
    assert 'hint: fix the calls, or mark a call that must fail with "expect_error"' in refused.output
    assert path.read_text() == recorded and "final_state" not in json.loads(bad.read_text())


def test_cli_names_what_is_wrong_with_its_input(notes: Path, tmp_path: Path) -> None:
    unknown = runner.invoke(app, ["scenario", "record", str(notes), "nope"])
    assert (
        unknown.exit_code == 2
        and "no scenario 'nope'" in unknown.output
        and "add_then_archive" in unknown.output
    )
    (notes / "scenarios" / "broken.json").write_text(json.dumps({"name": "broken", "stepz": []}))
    broken = runner.invoke(app, ["scenario", "record", str(notes), "broken"])
    assert (
        broken.exit_code == 1
        and "is not a scenario" in broken.output
        and "envreg schema scenario" in broken.output
    )
    missing = runner.invoke(app, ["scenario", "record", str(tmp_path / "nowhere")])
    assert missing.exit_code == 2 and "no environment" in missing.output
    empty = tmp_path / "empty"
    shutil.copytree(notes, empty)
    shutil.rmtree(empty / "scenarios")
    assert "holds no scenario files" in runner.invoke(app, ["scenario", "record", str(empty)]).output
