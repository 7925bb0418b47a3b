"""BFCL multi-turn classes as envreg environments: schemas, exact states, and verdicts that agree with BFCL's checker."""

from __future__ import annotations

import json
import time
from collections import Counter

import pytest
from conftest import ROOT, bfcl_entries, scaled
from jsonschema import Draft202012Validator, FormatChecker
from typer.testing import CliRunner

from envreg.adapters import bfcl
from envreg.adapters.bfcl_images import write_folders
from envreg.adapters.bfcl_replay import replay_all
from envreg.canonical import canonical_json
from envreg.cli.main import app
from envreg.env import load_environment
from envreg.runtime import Runtime

pytestmark = pytest.mark.anyio
runner = CliRunner()


def test_tools_and_schemas_come_from_bfcl_function_docs() -> None:
    for class_name in bfcl.CLASSES:
        env = bfcl.environment(class_name)
        docs = bfcl.function_docs(class_name)
        assert list(env.tools) == [d["name"] for d in docs]
        for doc in docs:
            tool = env.tools[doc["name"]].describe()
            schema = tool["inputSchema"]
            Draft202012Validator.check_schema(schema)
            assert schema["type"] == "object" and schema["additionalProperties"] is False
            assert set(schema.get("properties", {})) == set(doc["parameters"].get("properties", {}))
            assert "dict" not in json.dumps(schema) and '"float"' not in json.dumps(schema)
            for name, prop in schema.get("properties", {}).items():
                if "default" in prop:  # BFCL's "None" default has no JSON form: dropped, the rest kept
                    assert prop["default"] != "None"
                    Draft202012Validator(prop).validate(prop["default"])
                    assert name not in schema.get("required", [])
            assert tool["description"] == doc["description"]
            assert "load_scenario" not in env.tools and "_load_scenario" not in env.tools


def test_calls_with_positional_arguments_become_named() -> None:
    owner, call = bfcl.parse_call("sort('final_report.pdf')", ["TwitterAPI", "GorillaFileSystem"])
    assert (owner, call.tool, call.arguments) == (
        "GorillaFileSystem",
        "sort",
        {"file_name": "final_report.pdf"},
    )
    _, call = bfcl.parse_call("post_tweet(content='hi', tags=('#a', '#b'))", ["TwitterAPI"])
    assert call.arguments == {"content": "hi", "tags": ["#a", "#b"]}
    with pytest.raises(ValueError, match="no involved class"):
        bfcl.parse_call("launch_rocket()", ["MathAPI"])
    with pytest.raises(ValueError, match=r"multiple values|unexpected"):
        bfcl.parse_call("cd('a', folder='b')", ["GorillaFileSystem"])


@pytest.mark.slow
def test_every_ground_truth_result_matches_its_output_schema_and_every_state_round_trips() -> None:
    validators: dict[tuple[str, str], Draft202012Validator] = {}
    checked = Counter()
    entries = bfcl_entries()  # all 800 under `scripts/test --full`
    for entry in entries:
        instances = {
            c: bfcl.environment(c).instance(bfcl.initial_state(c, entry.initial_config, entry.long_context))
            for c in entry.classes
        }
        for turn in entry.ground_truth:
            for source in turn:
                owner, call = bfcl.parse_call(source, entry.classes)
                result = instances[owner].call_tool(call.tool, call.arguments)
                tool = bfcl.environment(owner).tools[call.tool]
                if result.is_error or tool.output_schema is None:
                    continue
                key = (owner, call.tool)
                if key not in validators:
                    validators[key] = Draft202012Validator(tool.output_schema, format_checker=FormatChecker())
                problems = [e.message for e in validators[key].iter_errors(result.value)]
                assert not problems, (entry.id, source, problems[:2])
                checked["results"] += 1
        for c, instance in instances.items():
            text = instance.state.canonical()
            assert bfcl.environment(c).parse_state(json.loads(text)).canonical() == text, (entry.id, c)
            checked["states"] += 1
    assert checked["states"] == sum(len(e.classes) for e in entries) == scaled(1340, checked["states"])
    assert checked["results"] > scaled(3500, 3500 * len(entries) // 800)


def test_snapshots_keep_the_current_directory_and_random_state() -> None:
    env = bfcl.environment("GorillaFileSystem")
    entry = next(e for e in bfcl.load_entries(["base"]) if e.id == "multi_turn_base_0")
    instance = env.instance(bfcl.initial_state("GorillaFileSystem", entry.initial_config))
    assert not instance.call_tool("cd", {"folder": "document"}).is_error
    restored = env.instance(json.loads(instance.state.canonical()))
    assert restored.call_tool("pwd", {}).value == {"current_working_directory": "/workspace/document"}
    assert restored.call_tool("ls", {}).value == instance.call_tool("ls", {}).value

    vehicle = bfcl.environment("VehicleControlAPI")
    car = vehicle.instance()
    copy = vehicle.instance(json.loads(car.state.canonical()))
    readings = [car.call_tool("get_current_speed", {}).value for _ in range(2)]
    assert readings == [copy.call_tool("get_current_speed", {}).value for _ in range(2)]
    assert readings[0] != readings[1], "the seeded generator moves on, in the state"


def test_arguments_are_checked_against_the_published_schema() -> None:
    instance = bfcl.environment("TicketAPI").instance()
    result = instance.call_tool("close_ticket", {"ticket_id": "ticket_001"})
    assert result.is_error and "ticket_id: 'ticket_001' is not of type 'integer'" in result.error
    result = instance.call_tool("create_ticket", {"title": "x", "colour": "red"})
    assert result.is_error and "colour: unexpected argument" in result.error


def test_bfcl_coercion_accepts_a_number_as_a_string_exactly_where_the_method_converts_it() -> None:
    """BFCL's harness hands methods what the model wrote; set_budget_limit converts it (float(...)),
    close_ticket does not. The published schemas stay as BFCL documents them."""
    entry = next(e for e in bfcl.load_entries(["base"]) if e.id == "multi_turn_base_153")
    initial = bfcl.initial_state("TravelAPI", entry.initial_config)
    lenient = bfcl.environment("TravelAPI").instance(initial)
    strict = bfcl.environment("TravelAPI", "strict").instance(initial)
    args = {"access_token": "abc123xyz", "budget_limit": "2857.14"}
    theirs = bfcl.bfcl_class("TravelAPI")()
    theirs._load_scenario(entry.initial_config["TravelAPI"], long_context=False)
    ours = lenient.call_tool("set_budget_limit", args)
    assert not ours.is_error and ours.value == theirs.set_budget_limit(**args) == {"budget_limit": 2857.14}
    assert lenient.state.to_json()["public"]["budget_limit"] == 2857.14
    refused = strict.call_tool("set_budget_limit", args)
    assert refused.is_error and "budget_limit: '2857.14' is not of type 'number'" in refused.error
    schema = next(t for t in lenient.env.list_tools() if t["name"] == "set_budget_limit")["inputSchema"]
    assert schema["properties"]["budget_limit"]["type"] == "number", "agents see BFCL's schema"
    for mode in bfcl.COERCIONS:
        closed = bfcl.environment("TicketAPI", mode).instance().call_tool("close_ticket", {"ticket_id": "1"})
        assert closed.is_error and "is not of type 'integer'" in closed.error, mode
    assert bfcl.converted_parameters("MathAPI", "logarithm") == {"value", "base", "precision"}  # via mpmath
    assert bfcl.converted_parameters("TicketAPI", "close_ticket") == frozenset()


#: base entries whose numbers written as strings BFCL's methods accept: logarithm (mpmath converts) in
#: 32, 49, 57; set_budget_limit (float()) in 153, 154, 165, 166, 182, 192
NUMBERS_ACCEPTED = [32, 49, 57, 153, 154, 165, 166, 182, 192]


async def test_numbers_written_as_strings_agree_with_bfcl_under_its_coercion_and_not_under_strict() -> None:
    entries = [e for e in bfcl.load_entries(["base"]) if int(e.id.rsplit("_", 1)[1]) in NUMBERS_ACCEPTED]
    async with Runtime() as rt:
        lenient = await replay_all(rt, entries, variant="numbers-as-strings")
    assert [r.agree and r.envreg.valid and r.bfcl.valid for r in lenient.results] == [True] * 9
    async with Runtime() as rt:  # a runtime serves one environment per name
        strict = await replay_all(rt, entries, variant="numbers-as-strings", coercion="strict")
    assert [(r.envreg.valid, r.bfcl.valid) for r in strict.results] == [(False, True)] * 9


@pytest.mark.slow
async def test_every_entry_with_numbers_agrees_when_they_are_written_as_strings() -> None:
    from envreg.adapters.bfcl_replay import has_numbers

    entries = [e for e in bfcl.load_entries() if has_numbers(e)]
    assert len(entries) == 560
    entries = entries[: scaled(560, 40)]
    async with Runtime() as rt:
        report = await replay_all(rt, entries, variant="numbers-as-strings")
    assert report.disagreements == [] and len(report.results) == len(entries)


@pytest.mark.slow
async def test_all_800_entries_agree_with_bfcls_checker_on_the_local_tier() -> None:
    entries = bfcl_entries()  # all 800 under `scripts/test --full`
    async with Runtime() as rt:
        report = await replay_all(rt, entries)
    rows = report.by_category()
    assert set(rows) == set(bfcl.CATEGORIES)
    per_category = scaled(200, 40)
    for category, row in rows.items():
        assert row["entries"] == per_category, category
        assert row["envreg valid"] == row["bfcl valid"] == row["agree"] == per_category, (category, row)
    calls = sum(len(turn) for e in entries for turn in e.ground_truth)
    assert sum(r["calls"] for r in rows.values()) == calls == scaled(4625, calls)


async def test_dropping_the_last_call_makes_every_base_entry_invalid_under_both() -> None:
    async with Runtime() as rt:
        report = await replay_all(rt, bfcl.load_entries(["base"]), variant="drop-last")
    row = report.by_category()["base"]
    assert row["entries"] == row["agree"] == 200
    assert row["envreg valid"] == row["bfcl valid"] == 0
    reasons = Counter(r.envreg.reason.split(": ")[1].split(" ")[0] for r in report.results)
    assert reasons["no"] > 0 and sum(v for k, v in reasons.items() if k != "no") > 0, reasons


async def test_snapshot_restore_between_every_turn_still_agrees() -> None:
    async with Runtime() as rt:
        report = await replay_all(rt, bfcl.load_entries(["base"]), restore_each_turn=True)
    row = report.by_category()["base"]
    assert row["agree"] == row["envreg valid"] == 200


async def test_a_wrong_call_is_invalid_under_both_and_bfcls_cache_is_left_clean() -> None:
    from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils

    from envreg.adapters.bfcl_replay import Replayer

    entry = next(e for e in bfcl.load_entries(["base"]) if e.id == "multi_turn_base_1")
    wrong = bfcl.Entry(
        entry.id, entry.category, entry.classes, entry.initial_config, entry.ground_truth, entry.raw
    )
    before = set(vars(multi_turn_utils))
    async with Runtime() as rt:
        replayer = Replayer(rt)
        object.__setattr__(wrong, "ground_truth", entry.ground_truth)
        turns = [list(t) for t in entry.ground_truth]
        turns[1] = ["cd(folder='workspace')", "mv(source='log.txt',destination='archived')"]  # wrong target
        from envreg.adapters import bfcl_replay

        initial = {c: bfcl.initial_state(c, entry.initial_config) for c in entry.classes}
        verdict, _ = await replayer._envreg_verdict(
            entry, turns, initial, bfcl_replay.expected_run(entry, initial)
        )
        theirs = bfcl_replay.bfcl_verdict(entry, turns, replayer.model_name)
    assert not verdict.valid and "state differs" in verdict.reason
    assert not theirs.valid and theirs.reason == "multi_turn:instance_state_mismatch"
    assert set(vars(multi_turn_utils)) == before, "the checker's cached instances were dropped"


def test_the_image_folders_are_generated_and_current() -> None:
    lock = (ROOT / "images/base/bfcl-requirements.lock").read_text()
    assert write_folders(ROOT / "images", lock, check=True) == []
    for class_name in bfcl.CLASSES:
        env = load_environment(bfcl.env_name(class_name))
        assert env.version == bfcl.BFCL_VERSION and env.volatile == ("private",)
        assert (env.folder / "requirements.lock").read_text() == lock


def test_replay_command_prints_the_agreement_table() -> None:
    result = runner.invoke(app, ["adapters", "bfcl", "replay", "--category", "base", "--limit", "5"])
    assert result.exit_code == 0, result.output
    assert "BFCL multi-turn replay" in result.output and "wall time" in result.output
    assert "base" in result.output
    result = runner.invoke(app, ["adapters", "bfcl", "replay", "--category", "nope"])
    assert result.exit_code == 2 and "unknown category 'nope'" in result.output
    result = runner.invoke(
        app, ["adapters", "bfcl", "replay", "--category", "base", "--limit", "3", "--json"]
    )
    data = json.loads(result.output)
    assert data["categories"]["base"]["agree"] == 3 and data["disagreements"] == []
    assert canonical_json(data)  # plain JSON


def test_replays_of_the_same_calls_give_the_same_state_hash() -> None:
    """GorillaFileSystem stamps files with the wall clock: it reads a fixed clock, so that state hashes and
    snapshot ids of replays agree."""
    from envreg.server.instances import InstanceStore

    env = bfcl.build_environment("GorillaFileSystem")
    hashes = []
    for _ in range(2):
        store = InstanceStore(env, 4)
        iid, instance = store.create()
        for tool, arguments in [
            ("touch", {"file_name": "notes.txt"}),
            ("echo", {"content": "hello", "file_name": "notes.txt"}),
            ("mkdir", {"dir_name": "archive"}),
        ]:
            assert not store.call_tool(iid, tool, arguments).is_error
        hashes.append(instance.state.sha256())
        time.sleep(0.01)
    assert hashes[0] == hashes[1]
