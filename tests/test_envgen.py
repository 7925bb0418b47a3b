"""EnvGen without the engine: reading metadata, OpenAPI documents and briefs; drafts that cannot write outside
their folder; reports; the stand-in's environments and defects; the model over real HTTP; proposals; the CLI's
refusals. The revise loop itself (sandboxes, images, validate) is in tests/test_envgen_docker.py.

The stand-in's drafts are inspected in this process (`inspect_draft` with foreign code allowed): they are
envreg's own scripted output, not a model's, and this is what shows each defect class is the one its check
catches; EnvGen itself only ever runs them in container sandboxes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import FIXTURES, ROOT
from typer.testing import CliRunner

from envreg.cli.main import app
from envreg.envgen.draft import Draft, write_files
from envreg.envgen.inspect import inspect_draft
from envreg.envgen.loop import prepare_output, prompt_spec, write_metadata
from envreg.envgen.prompts import WRITE_SYSTEM, section, write_prompt
from envreg.envgen.propose import catalog_gaps, check_proposal, propose, write_proposals
from envreg.envgen.report import Failure, for_model, from_evidence, metadata_failures
from envreg.envgen.spec import Brief, Spec, SpecProblem, from_metadata, read_input
from envreg.errors import Conflict
from envreg.standin import StandInLLM
from envreg.standin.envgen import DEFECTS, EnvGenScript, names_defect
from envreg.standin.envgen import write_files as standin_files
from envreg.synth.graph import load_manifests

runner = CliRunner()
ENVGEN = FIXTURES / "envgen"
INPUTS = sorted(ENVGEN.iterdir())
METADATA = [p for p in INPUTS if p.suffix == ".json"]
BOOKINGS = FIXTURES / "envfactory" / "bookings_tools.json"


def spec_of(path: Path) -> Spec:
    spec = read_input(path)
    assert isinstance(spec, Spec)
    return spec


# ------------------------------------------------------------------------------------------ inputs
def test_the_fixtures_are_twenty_inputs_of_three_kinds() -> None:
    kinds = [read_input(p) for p in INPUTS]
    assert len(kinds) >= 20
    sources = {k.source if isinstance(k, Spec) else "brief" for k in kinds}
    assert sources == {"envfactory", "openapi", "brief"}


def test_envfactory_metadata_is_read_as_the_interface() -> None:
    spec = spec_of(BOOKINGS)
    assert (spec.name, spec.class_name, spec.source) == ("bookings", "Bookings", "envfactory")
    book = next(t for t in spec.tools if t.name == "book")
    assert (
        book.required == ["hotel_id", "nights", "guests"] and book.parameters["nights"]["type"] == "integer"
    )
    with pytest.raises(SpecProblem, match="not an environment name") as info:
        read_input(BOOKINGS, name="Hotel Bookings")
    assert "--name hotel-bookings" in info.value.hint


def test_an_openapi_document_becomes_one_tool_per_operation() -> None:
    spec = spec_of(ENVGEN / "petstore.openapi.json")
    assert (spec.name, spec.domain, spec.source) == ("pet-store", "commerce", "openapi")
    tools = {t.name: t for t in spec.tools}
    assert list(tools) == ["list_pets", "add_pet", "get_pet", "delete_pet", "adopt_pet"]
    assert tools["add_pet"].required == ["name"] and set(tools["add_pet"].parameters) == {
        "name",
        "tag",
    }  # $ref body
    assert tools["adopt_pet"].required == ["pet_id", "email"]  # path parameter renamed, body merged
    assert tools["list_pets"].output_schema["items"]["properties"]["name"] == {"type": "string"}
    assert any("'pet-id' is named 'pet_id'" in n for n in spec.notes)
    with pytest.raises(SpecProblem, match="OpenAPI 3"):
        from envreg.envgen.spec import from_openapi

        from_openapi({"swagger": "2.0", "paths": {}})


def test_names_that_are_not_python_identifiers_are_renamed_and_noted() -> None:
    spec = from_metadata(
        {
            "class_name": "FX",
            "description": "Money.",
            "tools": [
                {
                    "name": "convert-money",
                    "input_schema": {
                        "properties": {"from": {"type": "string"}, "_to": {}},
                        "required": ["from"],
                    },
                }
            ],
        }
    )
    (tool,) = spec.tools
    assert (
        tool.name == "convert_money"
        and list(tool.parameters) == ["from_", "to"]
        and tool.required == ["from_"]
    )
    assert len(spec.notes) == 3


@pytest.mark.parametrize(
    ("content", "words"),
    [
        ("[1, 2]", "holds a JSON list"),
        ('{"class_name": "X"}', "not EnvFactory metadata"),
        ('{"class_name": "X", "description": "d", "tools": []}', "lists no tools"),
        ("{nope", "is not JSON"),
    ],
)
def test_inputs_that_are_not_metadata_are_refused_saying_why(
    tmp_path: Path, content: str, words: str
) -> None:
    path = tmp_path / "in.json"
    path.write_text(content)
    with pytest.raises(SpecProblem, match=words):
        read_input(path)


def test_a_brief_is_text_and_the_model_writes_its_metadata(tmp_path: Path) -> None:
    brief = read_input(ENVGEN / "photo_album.txt")
    assert isinstance(brief, Brief) and brief.text.startswith("Photo albums")
    empty = tmp_path / "empty.md"
    empty.write_text("  \n")
    with pytest.raises(SpecProblem, match="is empty"):
        read_input(empty)
    pytest.importorskip("openai", reason="the LLM client is the openai SDK (envreg's synth extra)")
    import anyio

    from envreg.synth.llm import LLMConfig

    with StandInLLM(EnvGenScript()) as llm:
        spec = anyio.run(write_metadata, LLMConfig(llm.base_url, "standin"), brief)
    assert spec.source == "brief" and spec.name == "photo-albums" and len(spec.tools) == 5
    assert "Photo albums" in llm.requests[0]["messages"][1]["content"]


# ------------------------------------------------------------------------------------------ drafts
@pytest.mark.parametrize(
    "path",
    [
        "../env.py",
        "/etc/passwd",
        "scenarios/../../x.json",
        "scenarios/a/b.json",
        "other.py",
        "env.py/..",
        ".hidden.json",
    ],
)
def test_a_draft_names_only_the_files_of_an_environment_folder(path: str) -> None:
    with pytest.raises(ValueError, match=r"is not one of env\.py"):
        Draft.parse({"files": {"env.py": "x = 1", path: "{}"}})


def test_a_draft_is_checked_before_anything_is_written(tmp_path: Path) -> None:
    for answer, words in [
        ({"files": {"seed.json": {}}}, "must include env.py"),
        ({"files": {"env.py": 1}}, "source as a string"),
        ({"files": {"env.py": "", "seed.json": "{bad"}}, "seed.json is not JSON"),
        ({"files": {"env.py": "", "seed.json": [1]}}, "must be a JSON object"),
        ({"files": {"env.py": "x" * (2 << 20)}}, "over 1 MiB"),
        ("just text", "answer with a JSON object"),
    ]:
        with pytest.raises(ValueError, match=words):
            Draft.parse(answer)
    draft = Draft.parse({"files": {"env.py": "x = 1\n", "seed.json": '{"a": 1}'}, "notes": "n"})
    assert draft.files["seed.json"] == b'{\n  "a": 1\n}\n' and draft.to_json()["files"]["seed.json"] == {
        "a": 1
    }
    assert json.loads(draft.folder_files()["foreign.json"])["kind"] == "envgen"  # never imported on the host
    with pytest.raises(ValueError, match="is not inside"):
        write_files(tmp_path / "f", {"../escape.txt": b"x"})
    assert not (tmp_path / "escape.txt").exists()


# ----------------------------------------------------------------------------------------- reports
@pytest.fixture
def inspect_stand_in(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """Inspect a stand-in draft (trusted code, see the module docstring) in this process: (answer, failures)."""
    monkeypatch.setenv("ENVREG_FOREIGN_CODE", "allow")

    def run(spec_dict: dict, defect: str) -> tuple[dict, list[dict]]:
        folder = tmp_path / defect / spec_dict["name"]
        write_files(folder, Draft.parse({"files": standin_files(spec_dict, defect)}).folder_files())
        answer = inspect_draft(folder.parent, {"folder": folder.name, "call_timeout": 1.0})
        return answer, answer["failures"]

    return run


def test_metadata_failures_name_the_tool_the_parameter_and_both_schemas(inspect_stand_in) -> None:
    spec = spec_of(BOOKINGS)
    answer, failures = inspect_stand_in(prompt_spec(spec), "good")
    assert failures == [] and metadata_failures(spec, answer["tools"]) == []
    tools = {t["name"]: json.loads(json.dumps(t)) for t in answer["tools"]}
    tools["book"]["inputSchema"]["properties"]["nights"] = {"type": "string"}
    tools["book"]["inputSchema"]["properties"]["extra"] = {"type": "string"}
    tools["book"]["inputSchema"]["required"] = ["hotel_id", "nights"]
    del tools["login"]["inputSchema"]["properties"]["password"]
    del tools["cancel"]
    found = {(f.tool, f.message) for f in metadata_failures(spec, list(tools.values()))}
    assert found == {
        ("book", "tool 'book': parameter 'nights' is string, the metadata says integer"),
        ("book", "tool 'book': parameter 'extra' is not in the metadata"),
        ("book", "tool 'book': parameter 'guests' must be required"),
        ("login", "tool 'login': parameter 'password' is missing"),
        ("cancel", "tool 'cancel' of the metadata is missing"),
    }


def test_shared_vocabulary_and_optional_parameters_match_plain_metadata_types(inspect_stand_in) -> None:
    spec = spec_of(ENVGEN / "car_rental.json")
    answer, _ = inspect_stand_in(prompt_spec(spec), "good")
    search = next(t for t in answer["tools"] if t["name"] == "search_cars")["inputSchema"]
    assert "enum" in search["properties"]["city"]  # City, narrower than the metadata's string
    assert "anyOf" in search["properties"]["seats"]  # int | None
    assert metadata_failures(spec, answer["tools"]) == []


def test_validate_evidence_becomes_structured_failures() -> None:
    f = from_evidence(
        "state.determinism",
        'replays differ: scenario add_two, step 1 (add_note): the result differs: "note_e6" (first) vs "note_e1" (second)',
    )
    assert (f.scenario, f.step, f.tool) == ("add_two", 1, "add_note")
    assert (f.expected, f.got) == ('"note_e6" (first)', '"note_e1" (second)')
    g = from_evidence(
        "scenarios.final_states",
        'scenario refusals: final state differs: history.1: "x" (got) vs (absent) (expected)',
    )
    assert (g.scenario, g.expected, g.got) == ("refusals", "(absent) (expected)", '"x" (got)')
    h = from_evidence(
        "sandbox.no_network", "tool 'convert' (scenario convert, step 1) opened network traffic"
    )
    assert h.tool == "convert"
    many = [
        Failure(stage="inspect", check="x", message=str(i), traceback="\n".join(map(str, range(30))))
        for i in range(45)
    ]
    shown = for_model(many)
    assert (
        len(shown) == 41
        and shown[-1]["message"] == "5 more failures"
        and shown[0]["traceback"].startswith("18")
    )


# ------------------------------------------------------------------------------------ the stand-in
@pytest.mark.parametrize("path", METADATA, ids=lambda p: p.stem)
def test_the_stand_ins_good_environment_of_each_fixture_passes_its_own_inspection(
    path: Path, inspect_stand_in
) -> None:
    spec = spec_of(path)
    answer, failures = inspect_stand_in(prompt_spec(spec), "good")
    assert failures == [] and answer["imported"] and answer["name"] == spec.name
    assert metadata_failures(spec, answer["tools"]) == []
    called = {s["tool"] for text in answer["recorded"].values() for s in json.loads(text)["steps"]}
    assert called == {t.name for t in spec.tools}


EXPECTED = {  # the defect -> the check of the sandbox inspection that sees it (None: only envreg validate does)
    "syntax": "envgen.import",
    "schema": "envgen.metadata",
    "hang": "envgen.hang",
    "scenario": "scenarios.results",
    "uuid": "scenarios.results",
    "journal": None,
}


@pytest.mark.parametrize("defect", DEFECTS)
def test_each_defect_is_seen_by_its_check_and_named_well_enough_to_fix(defect: str, inspect_stand_in) -> None:
    spec = spec_of(BOOKINGS)
    answer, failures = inspect_stand_in(prompt_spec(spec), defect)
    if answer["imported"]:
        failures += [f.brief() for f in metadata_failures(spec, answer["tools"])]
    checks = {f["check"] for f in failures}
    if EXPECTED[defect] is None:
        assert failures == []  # the sandbox run cannot see it: envreg validate's state.transactional does
        return
    assert EXPECTED[defect] in checks, failures
    target = {"syntax": "login", "hang": "login", "schema": "book", "scenario": "login", "uuid": "login"}[
        defect
    ]
    if defect in ("syntax", "hang", "schema"):
        assert names_defect(defect, failures, target)
    if defect == "hang":
        hung = next(f for f in failures if f["check"] == "envgen.hang")
        assert hung["tool"] == "login" and "while len(state.history) >= 0" in hung["traceback"]
    if defect == "syntax":
        assert "line" in failures[0]["message"] and failures[0]["traceback"].endswith(
            "SyntaxError: expected ':'"
        )


def test_the_script_fixes_a_defect_only_when_the_report_names_it() -> None:
    script = EnvGenScript(["syntax", "hang"])
    spec = prompt_spec(spec_of(BOOKINGS))

    def answer(previous: dict | None, report: list | None, revision: int) -> str:
        files = script.draft(write_prompt(spec, revision, 5, previous, report))["files"]
        return files["env.py"].split("defect=", 1)[1].split("\n", 1)[0]

    first = script.draft(write_prompt(spec, 1, 5))
    assert "defect=syntax" in first["files"]["env.py"]
    told = [
        {"check": "envgen.import", "message": "SyntaxError: expected ':' (env.py, line 54: def login...)"}
    ]
    assert answer(first, told, 2) == "hang"
    assert answer(first, [{"check": "envgen.import", "message": "something failed"}], 2) == "syntax"
    second = script.draft(write_prompt(spec, 2, 5, first, told))
    assert answer(second, [{"check": "envgen.hang", "tool": "login", "message": "..."}], 3) == "good"
    with pytest.raises(ValueError, match="unknown defect 'typo'"):
        EnvGenScript(["typo"])


def test_a_prompt_reads_back_section_by_section() -> None:
    spec = prompt_spec(spec_of(BOOKINGS))
    report = [{"stage": "inspect", "check": "envgen.hang", "message": "## not a section\n```"}]
    prompt = write_prompt(spec, 3, 4, {"files": {"env.py": "x\n## y"}}, report)
    assert section(prompt, "Metadata") == spec and section(prompt, "Report") == report
    assert (
        section(prompt, "Your files") == {"files": {"env.py": "x\n## y"}}
        and "revision 3 of at most 4" in prompt
    )
    assert "id_counters" in WRITE_SYSTEM and "heapq" in WRITE_SYSTEM and "City" in WRITE_SYSTEM


# ---------------------------------------------------------------------------------------- the output
def test_the_output_folder_is_never_taken_from_someone_else(tmp_path: Path) -> None:
    out = tmp_path / "out"
    (out / "bookings").mkdir(parents=True)
    (out / "bookings" / "env.py").write_text("mine")
    with pytest.raises(Conflict, match="not written by envreg envgen"):
        prepare_output(out, "bookings", force=True)
    assert (out / "bookings" / "env.py").read_text() == "mine"
    (out / "bookings" / "foreign.json").write_text(json.dumps({"kind": "envgen"}))
    (out / "envgen.json").write_text("{}")
    (out / "notes.txt").write_text("keep")
    with pytest.raises(Conflict, match="already holds a run"):
        prepare_output(out, "bookings", force=False)
    prepare_output(out, "bookings", force=True)
    assert not (out / "bookings").exists() and not (out / "envgen.json").exists()
    assert (out / "notes.txt").read_text() == "keep"


# ---------------------------------------------------------------------------------------- proposals
def test_catalog_gaps_and_proposals_for_what_it_lacks(tmp_path: Path) -> None:
    manifests = load_manifests(ROOT / "manifests")
    gaps = catalog_gaps(manifests)
    assert "vehicle" in gaps["thin_domains"] and "office" not in gaps["thin_domains"]
    assert any(r["parameter"] == "client_id" for r in gaps["unproduced_ids"])
    with pytest.raises(SpecProblem, match="already in the catalog"):
        check_proposal(
            {"class_name": "Calendar", "description": "d", "tools": [{"name": "a"}] * 3}, {"calendar"}
        )
    pytest.importorskip("openai", reason="the LLM client is the openai SDK (envreg's synth extra)")
    import anyio

    from envreg.synth.llm import LLMConfig

    with StandInLLM(EnvGenScript()) as llm:
        proposals, _ = anyio.run(propose, LLMConfig(llm.base_url, "standin"), manifests, 2)
    domains = {m.domain for m in manifests}
    assert len(proposals) == 2 and all(s.domain not in domains for s, _ in proposals)
    paths = write_proposals(tmp_path, proposals)
    assert spec_of(paths[0]).tools == proposals[0][0].tools  # ready for `envreg envgen FILE`
    with pytest.raises(Conflict, match="exists"):
        write_proposals(tmp_path, proposals)


def test_propose_cli_prints_the_gaps_without_a_model_and_writes_files_with_one(tmp_path: Path) -> None:
    result = runner.invoke(app, ["envgen", "propose", "--manifests", str(ROOT / "manifests"), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["proposals"] == []
    pytest.importorskip("openai", reason="the LLM client is the openai SDK (envreg's synth extra)")
    with StandInLLM(EnvGenScript()) as llm:
        result = runner.invoke(
            app,
            [
                "envgen",
                "propose",
                "--manifests",
                str(ROOT / "manifests"),
                "--llm-base-url",
                llm.base_url,
                "--model",
                "standin",
                "-n",
                "2",
                "--out",
                str(tmp_path / "p"),
                "--json",
            ],
        )
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)["proposals"]
    assert [Path(r["path"]).parent for r in rows] == [tmp_path / "p"] * 2 and all(
        Path(r["path"]).is_file() for r in rows
    )


def test_envgen_cli_refusals(tmp_path: Path) -> None:
    no_model = runner.invoke(app, ["envgen", str(BOOKINGS)])
    assert no_model.exit_code == 2 and "pass --llm-base-url and --model" in no_model.output
    missing = runner.invoke(
        app, ["envgen", str(tmp_path / "nope.json"), "--llm-base-url", "http://x/v1", "--model", "m"]
    )
    assert missing.exit_code == 2 and "is not a file" in missing.output
    bad_name = runner.invoke(
        app,
        [
            "envgen",
            str(BOOKINGS),
            "--name",
            "../up",
            "--llm-base-url",
            "http://x/v1",
            "--model",
            "m",
            "--out",
            str(tmp_path / "o"),
        ],
    )
    assert bad_name.exit_code == 2 and "is not an environment name" in bad_name.output
    assert not (tmp_path / "o").exists()
    helped = runner.invoke(app, ["envgen", "--help"])
    assert "generate" in helped.output and "propose" in helped.output


def test_the_sandboxs_answer_is_checked_before_the_host_uses_it() -> None:
    from envreg.envgen.inspect import Inspection

    good = {"imported": True, "hung": False, "recorded": {"scenarios/a.json": "{}"}, "failures": []}
    assert Inspection.read(good, {"scenarios/a.json"}).recorded == {"scenarios/a.json": "{}"}
    with pytest.raises(ValueError, match=r"does not have: \.\./x\.json"):
        Inspection.read({**good, "recorded": {"../x.json": "{}"}}, {"scenarios/a.json"})
    with pytest.raises(ValueError):
        Inspection.read({**good, "failures": [{"stage": "mine", "check": "x", "message": "m"}]}, set())
    with pytest.raises(ValueError):
        Inspection.read({**good, "extra": 1}, set())
