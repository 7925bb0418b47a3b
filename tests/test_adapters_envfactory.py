"""EnvFactory tool files served through their @mcp.tool functions, bound to the class found in the file.

The tests here run the fixtures (written for envreg, in EnvFactory's style) in process: they are this
project's own code. What a user runs, `envreg import envfactory`, inspects a file only in a container
sandbox (tests/test_sandboxing.py).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import FIXTURES
from typer.testing import CliRunner

from envreg.adapters import envfactory as ef
from envreg.adapters.envfactory_import import inspect_tool_file, write_folder
from envreg.cli.main import app
from envreg.env import UnknownToolError, load_environment
from envreg.env.loader import _load
from envreg.errors import ForeignCode
from envreg.runtime import InvalidState, Runtime

pytestmark = pytest.mark.anyio
runner = CliRunner()
EF = FIXTURES / "envfactory"
BOOKINGS_SEED = json.loads((EF / "bookings_seed.json").read_text())


def served(module: str) -> ef.Served:
    return ef.serve(EF / f"{module}_tools.py", EF / f"{module}_tools.json")


def inspect(tmp_path: Path, module: str, seed: object = None, scenarios: list | None = None) -> dict:
    """The import report of a fixture, made in process (the CLI makes it in a sandbox)."""
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    for suffix in (".py", ".json"):
        shutil.copy(EF / f"{module}_tools{suffix}", work)
    return inspect_tool_file(
        work,
        {
            "tool": f"{module}_tools.py",
            "metadata": f"{module}_tools.json",
            "name": module.replace("_", "-"),
            "version": "1.0.0",
            "domain": "general",
            "seed": seed,
            "scenarios": scenarios or [],
        },
    )


def test_the_tools_are_the_files_functions_bound_to_the_class_found_in_the_file() -> None:
    s = served("bookings")
    assert s.binding.cls.__name__ == "BookingAPI" and s.binding.name == "api"
    assert any("class_name 'Bookings' is not the state class: serving BookingAPI" in n for n in s.notes)
    assert list(s.env.tools) == ["login", "find_hotels", "book", "cancel"], "load/save_scenario stay hidden"
    tools = {t["name"]: t for t in s.env.list_tools()}
    book = tools["book"]["inputSchema"]
    assert book["required"] == ["hotel_id"], "the function's defaults, not the method's required arguments"
    assert book["properties"]["nights"] == {"default": 1, "title": "Nights", "type": "integer"}
    assert "Book a hotel; you must be signed in." in tools["book"]["description"]
    assert tools["login"]["outputSchema"] == {
        "properties": {"result": {"title": "Result", "type": "string"}},
        "required": ["result"],
        "title": "loginOutput",
        "type": "object",
    }
    assert "outputSchema" not in tools["book"], "a bare dict has no structured output in FastMCP"


def test_defaults_checks_and_shaping_come_from_the_functions_and_state_is_per_conversation() -> None:
    env = served("bookings").env
    one, two = env.instance({"scenario": BOOKINGS_SEED}), env.instance({"scenario": BOOKINGS_SEED})
    found = one.call_tool("find_hotels", {"city": "Fresno"})  # `state` defaults to "CA"
    assert not found.is_error and found.value == [BOOKINGS_SEED["hotels"]["H1"]]
    assert json.loads(found.text) == BOOKINGS_SEED["hotels"]["H1"], "rendered item by item, as FastMCP does"
    texas = one.call_tool("find_hotels", {"city": "Austin", "state": "TX"})  # a parameter named `state`
    assert texas.value == [BOOKINGS_SEED["hotels"]["H2"]]
    refused = one.call_tool("book", {"hotel_id": "H1"})
    assert refused.is_error and refused.error == "Error executing tool book: Sign in first"
    signed = one.call_tool("login", {"user": "ana", "password": "s3cret"})
    assert signed.text == "Signed in as ana" and signed.structured == {"result": "Signed in as ana"}
    assert one.state.to_json()["module"] == {"_session_user": "ana"}, "the module global is state"
    booked = one.call_tool("book", {"hotel_id": "H1", "nights": 2})
    assert booked.value["booking"] == {
        "booking_id": "B001",
        "hotel_id": "H1",
        "nights": 2,
        "guests": 2,
        "total": 240.0,
    }
    assert two.call_tool("book", {"hotel_id": "H1"}).is_error, "the other conversation is not signed in"
    before = one.state.to_json()
    bad = one.call_tool("book", {"hotel_id": "H1", "nights": 0})
    assert bad.error == "Error executing tool book: nights must be positive" and one.state.to_json() == before
    typed = one.call_tool("book", {"hotel_id": "H1", "nights": "x"})
    assert typed.error == "Input validation error: 'x' is not of type 'integer'"
    missing = one.call_tool("cancel", {})
    assert missing.error == "Input validation error: 'booking_id' is a required property"
    assert one.call_tool("cancel", {"booking_id": "B001"}).value == {"cancelled": "B001"}
    with pytest.raises(UnknownToolError):
        one.call_tool("load_scenario", {"scenario": {}})


async def test_every_tier_call_goes_through_the_runtime_and_failures_roll_back() -> None:
    env = served("inventory").env
    seed = {"scenario": json.loads((EF / "inventory_seed.json").read_text())}
    async with Runtime() as rt:
        one = await rt.sandbox(env, state=seed)
        two = await rt.sandbox(env, state=seed)
        placed = await one.call_tool(
            "place_order", {"lines": [{"sku": "A-1", "quantity": 2}], "priority": "rush"}
        )
        assert placed.value["order_id"] == "ORD-0001" and placed.value["total"] == 199.0
        assert (await two.call_tool("list_items", {})).value["items"][0]["quantity"] == 3
        before = await one.state()
        failed = await one.call_tool(
            "place_order", {"lines": [{"sku": "B-2", "quantity": 1}, {"sku": "Z-9", "quantity": 1}]}
        )
        assert failed.is_error and "unknown SKU Z-9" in failed.error
        assert await one.state() == before, "B-2 reserved before the bad line is back"
        with pytest.raises(InvalidState, match="load_scenario refused it"):
            await one.load_state({"scenario": {"items": {"X": {"sku": "X"}}}})
        assert await one.state() == before


def test_the_module_imports_unchanged_under_mcp_2() -> None:
    module = ef.load_module(EF / "inventory_tools.py")
    assert sorted(module.mcp.tools) == ["add_item", "list_items", "place_order", "restock"]
    with pytest.raises(RuntimeError, match="served by envreg"):
        module.mcp.run(transport="stdio")
    import sys

    assert "mcp.server.fastmcp" not in sys.modules, "the stand-in name is gone once the file is imported"


def test_the_import_report_records_a_scenario_from_the_seed(tmp_path: Path) -> None:
    report = inspect(tmp_path, "bookings", seed=BOOKINGS_SEED)
    assert report["ok"] and report["class"] == "BookingAPI" and report["round_trip"] is None
    steps = report["recorded"]["steps"]
    assert [s["tool"] for s in steps] == ["login", "find_hotels", "book", "cancel"]
    assert steps[0]["arguments"] == {"user": "example", "password": "example"}
    assert steps[1] == {
        "tool": "find_hotels",
        "arguments": {"city": "Fresno"},
        "expect": BOOKINGS_SEED["hotels"]["H1"],
    }
    assert steps[2]["arguments"] == {"hotel_id": "H1"}, "a value of that name from the seed"
    assert all(c["passed"] for c in report["checks"]), report["checks"]
    assert report["nondeterministic"] == []


def test_uuid4_ids_are_reported_and_left_out_of_the_recorded_scenario(tmp_path: Path) -> None:
    report = inspect(tmp_path, "ticket_ids", seed={"tickets": []})
    assert report["nondeterministic"] == [{"tool": "open_ticket", "differs": "result"}]
    assert [s["tool"] for s in report["recorded"]["steps"]] == ["count_open"]
    scenario = json.loads((EF / "ticket_ids_scenarios" / "open_two.json").read_text())
    report = inspect(tmp_path, "ticket_ids", scenarios=[scenario])
    check = next(c for c in report["checks"] if c["name"] == "deterministic")
    assert (
        check["passed"] is False
        and "open_two: call 1 (open_ticket) answered differently" in check["evidence"]
    )


def test_a_result_that_depends_on_the_hash_seed_is_reported_and_left_out(tmp_path: Path) -> None:
    report = inspect(tmp_path, "hashed")
    assert report["nondeterministic"] == [{"tool": "code_for", "differs": "result under another hash seed"}]
    assert [s["tool"] for s in report["recorded"]["steps"]] == ["count"]


def test_a_save_scenario_that_does_not_round_trip_is_reported(tmp_path: Path) -> None:
    scenario = json.loads((EF / "lossy_scenarios" / "three_notes.json").read_text())
    report = inspect(tmp_path, "lossy", scenarios=[scenario])
    checks = {c["name"]: c for c in report["checks"]}
    assert checks["state round-trip"]["passed"] is False
    assert "changes on dump -> load -> dump at /scenario/nextId" in checks["state round-trip"]["evidence"]


def test_a_file_whose_load_scenario_refuses_its_own_save_keeps_the_objects_attributes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    report = inspect(tmp_path, "clinic")
    assert report["ok"] and report["state"] == "attributes", report.get("problem")
    assert any("its load_scenario refuses what its save_scenario writes" in n for n in report["notes"])
    assert all(c["passed"] for c in report["checks"]), report["checks"]
    env = ef.serve(EF / "clinic_tools.py", EF / "clinic_tools.json", state="attributes").env
    one, two = env.instance(), env.instance()
    booked = one.call_tool("book", {"patient": "ana", "at": "2026-01-05T10:00:00", "room": 2})
    assert booked.value == {"appointment_id": "A001", "room": "south"}
    held = one.state.to_json()["attributes"]
    assert held["current_time"] == "", "kept as the object held it, though its own model refuses it"
    assert held["appointments"]["A001"]["$model"] == "Appointment"
    assert held["appointments"]["A001"]["fields"]["at"] == {"$datetime": "2026-01-05T10:00:00"}
    assert held["patients"] == {"$set": ["ana", "ben"]} and held["last"] == {"$tuple": ["ana", 2]}
    assert held["rooms"] == {"$dict": [[1, "north"], [2, "south"]]}
    assert held["by_patient"] == {"$defaultdict": "list", "items": {"ana": ["A001"]}}
    before = one.state.to_json()
    refused = one.call_tool("book", {"patient": "zoe", "at": "2026-01-05T11:00:00"})
    assert refused.error == "Error executing tool book: unknown patient zoe" and one.state.to_json() == before
    assert one.call_tool("cancel", {"appointment_id": "A001"}).value["status"] == "cancelled"
    assert two.call_tool("appointments_of", {"patient": "ana"}).text == "", "the other conversation has none"
    reloaded = env.parse_state(json.loads(one.state.canonical()))
    assert reloaded.canonical() == one.state.canonical()
    live = reloaded.live().obj
    assert live.appointments["A001"].status is type(live.appointments["A001"].status).CANCELLED
    assert live.appointments["A001"].at.hour == 10 and live.by_patient["ben"] == [], "a defaultdict again"
    assert one.call_tool("appointments_of", {"patient": "ana"}).value == ["A001"]
    folder = tmp_path / "images" / "clinic"
    files = {f"clinic_tools{s}": (EF / f"clinic_tools{s}").read_bytes() for s in (".py", ".json")}
    options = {"name": "clinic", "version": "1.0.0", "domain": "health"}
    write_folder(
        folder, files, tool="clinic_tools.py", metadata="clinic_tools.json", report=report, **options
    )
    assert "state='attributes'" in (folder / "env.py").read_text()
    assert json.loads((folder / "foreign.json").read_text())["state"] == "attributes"
    monkeypatch.setenv("ENVREG_FOREIGN_CODE", "allow")
    _load.cache_clear()
    imported = load_environment(folder)
    assert imported.initial_state().to_json()["attributes"]["current_time"] == ""
    assert imported.instance().call_tool("register", {"patient": "cy"}).value == {
        "patients": ["ana", "ben", "cy"]
    }


def test_calls_work_on_the_object_as_it_was_not_one_reloaded_by_load_scenario() -> None:
    env = served("prices").env
    sandbox = env.instance({"scenario": {"items": {"tea": {"name": "tea"}}}})
    first = sandbox.call_tool("get_item", {"name": "tea"})
    assert json.loads(first.text) == {"name": "tea", "price": 0} and '"price": 0\n' in first.text, (
        "the integer default EnvFactory's server answers, not the 0.0 a reload makes of it"
    )
    renamed = sandbox.call_tool("rename", {"name": "tea", "new_name": "green tea"})
    assert '"price": 0\n' in renamed.text, "and so on, call after call"
    before = sandbox.state.to_json()
    assert sandbox.call_tool("rename", {"name": "tea", "new_name": "x"}).is_error
    assert sandbox.state.to_json() == before, "a failing call worked on a copy"
    assert sandbox.call_tool("get_item", {"name": "green tea"}).value == {"name": "green tea", "price": 0}


def test_object_json_refuses_what_it_cannot_rebuild() -> None:
    import threading
    from types import ModuleType

    from envreg.adapters import object_json

    module = ModuleType("foreign_file")
    with pytest.raises(
        object_json.NoJsonForm, match=r"api\.lock is a _thread\.lock: only the file's own classes"
    ):
        object_json.encode({"lock": threading.Lock()}, module, "api")
    with pytest.raises(object_json.NoJsonForm, match="only the file's own classes"):
        object_json.encode({"path": Path("/tmp")}, module, "api")
    with pytest.raises(object_json.NoJsonForm, match="JSON cannot hold"):
        object_json.encode({"x": float("nan")}, module, "api")
    with pytest.raises(object_json.NoJsonForm, match="the file has no such class"):
        object_json.decode({"$model": "Missing", "fields": {}}, module)
    exact = {"$key": 1, 2: (3, frozenset({5, 4}))}
    assert object_json.decode(object_json.encode(exact, module), module) == exact


def test_a_seed_the_class_refuses_is_a_clear_problem(tmp_path: Path) -> None:
    report = inspect(tmp_path, "bookings", seed={"hotels": {"H1": {"hotel_id": "H1"}}})
    assert not report["ok"]
    assert report["problem"].startswith("the seed given does not load: the Bookings object cannot load it")
    assert "load_scenario refused it" in report["problem"] and "city" in report["problem"]


def test_a_network_call_is_blocked_rolled_back_and_reported(tmp_path: Path) -> None:
    scenario = json.loads((EF / "weather_scenarios" / "forecast.json").read_text())
    report = inspect(tmp_path, "weather", scenarios=[scenario])
    assert report["network"] == ["urllib.request"]
    check = next(c for c in report["checks"] if c["name"] == "no network")
    assert (
        not check["passed"]
        and "network call blocked: tool 'fetch_forecast' tried to reach ('127.0.0.1', 9)" in check["evidence"]
    )


def test_python_312_syntax_is_refused_with_the_line_and_the_reason(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    shutil.copy(EF / "modern_syntax_tools.py312", work / "modern_syntax_tools.py")
    shutil.copy(EF / "modern_syntax_tools.json", work)
    report = inspect_tool_file(
        work,
        {
            "tool": "modern_syntax_tools.py",
            "metadata": "modern_syntax_tools.json",
            "name": "t",
            "version": "1",
            "domain": "general",
            "seed": None,
        },
    )
    assert not report["ok"]
    assert "modern_syntax_tools.py line 3" in report["problem"] and "CPython 3.11" in report["problem"]


def test_metadata_that_names_other_tools_is_noted() -> None:
    s = served("inventory")
    assert s.notes == [], "the fixture's metadata matches"
    meta = json.loads((EF / "bookings_tools.json").read_text())
    assert [t["name"] for t in meta["tools"]] == list(served("bookings").env.tools)


def test_a_foreign_folder_is_refused_on_the_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    report = inspect(tmp_path, "bookings", seed=BOOKINGS_SEED)
    folder = tmp_path / "images" / "bookings"
    files = {f"bookings_tools{s}": (EF / f"bookings_tools{s}").read_bytes() for s in (".py", ".json")}
    write_folder(
        folder,
        files,
        tool="bookings_tools.py",
        metadata="bookings_tools.json",
        report=report,
        name="bookings",
        version="1.0.0",
        domain="travel",
        seed=BOOKINGS_SEED,
    )
    for name, data in files.items():
        assert (folder / name).read_bytes() == data, "copied byte for byte"
    _load.cache_clear()
    with pytest.raises(ForeignCode, match="runs its code only in a container sandbox, never on this host"):
        load_environment(folder)
    monkeypatch.setenv("ENVREG_FOREIGN_CODE", "allow")  # what sandboxes and images set
    env = load_environment(folder)
    assert env.name == "bookings" and env.initial_state().to_json()["scenario"] == BOOKINGS_SEED
    from envreg.env import load_scenarios

    (scenario,), _ = load_scenarios(folder)
    assert scenario.name == "recorded_from_seed" and len(scenario.steps) == 4


@pytest.mark.parametrize("name", ["..", "../x", "a/b", "Bad", "-x", ""])
def test_names_are_validated_and_nothing_is_written_outside_images(tmp_path: Path, name: str) -> None:
    images = tmp_path / "deep" / "images"
    result = runner.invoke(
        app,
        [
            "import",
            "envfactory",
            str(EF / "bookings_tools.py"),
            "--metadata",
            str(EF / "bookings_tools.json"),
            "--name",
            name,
            "--images",
            str(images),
        ],
    )
    assert result.exit_code == 1
    assert "is not an environment name" in " ".join(result.output.split())
    assert not any(tmp_path.rglob("*.py")), "nothing written"
