"""EnvFactory-format tool files imported unchanged: tools from the metadata, load/save as the control plane, checks."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import FIXTURES
from typer.testing import CliRunner

from envreg.adapters import envfactory as ef
from envreg.cli.main import app
from envreg.env import UnknownToolError, load_environment, load_scenarios
from envreg.env.loader import _load
from envreg.runtime import InvalidState, Runtime

pytestmark = pytest.mark.anyio
runner = CliRunner()
EF = FIXTURES / "envfactory"


def import_(tmp_path: Path, module: str, *extra: str) -> tuple[int, str]:
    _load.cache_clear()
    result = runner.invoke(
        app,
        [
            "import",
            "envfactory",
            str(EF / f"{module}_tools.py"),
            "--metadata",
            str(EF / f"{module}_tools.json"),
            "--images",
            str(tmp_path / "images"),
            *extra,
        ],
    )
    return result.exit_code, result.output


def test_import_copies_the_files_unchanged_and_every_check_passes(tmp_path: Path) -> None:
    code, output = import_(
        tmp_path,
        "inventory",
        "--seed",
        str(EF / "inventory_seed.json"),
        "--scenarios",
        str(EF / "inventory_scenarios"),
    )
    assert code == 0, output
    folder = tmp_path / "images" / "inventory-manager"
    for name in ("inventory_tools.py", "inventory_tools.json"):
        assert (folder / name).read_bytes() == (EF / name).read_bytes()
    for check in ("scenarios", "state round-trip", "deterministic", "transactional", "no network"):
        assert check in output
    assert "│ fail   │" not in output and "fail:" not in output and "envreg build inventory-manager" in output
    env = load_environment(folder)
    assert list(env.tools) == ["list_items", "add_item", "restock", "place_order"]
    assert env.description == "Stock of a small shop: items by SKU, restocking and orders."
    listed = {t["name"]: t for t in env.list_tools()}
    meta = json.loads((EF / "inventory_tools.json").read_text())
    for tool in meta["tools"]:
        assert listed[tool["name"]]["inputSchema"] == tool["input_schema"]
        assert listed[tool["name"]]["outputSchema"] == tool["output_schema"]
    assert env.initial_state().to_json()["scenario"]["items"]["A-1"]["name"] == "Anvil"
    code, output = import_(tmp_path, "inventory")
    assert code == 1 and "exists; pass --force" in output


async def test_each_conversation_has_its_own_object_and_failures_roll_back(tmp_path: Path) -> None:
    code, output = import_(tmp_path, "inventory", "--seed", str(EF / "inventory_seed.json"))
    assert code == 0, output
    env = load_environment(tmp_path / "images" / "inventory-manager")
    async with Runtime() as rt:
        one = await rt.sandbox(env)
        two = await rt.sandbox(env)
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
        refused = await one.call_tool("place_order", {"lines": [{"sku": "A-1", "quantity": "2"}]})
        assert refused.is_error and "is not of type 'integer'" in refused.error
        with pytest.raises(InvalidState, match="load_scenario refused it"):
            await one.load_state({"scenario": {"items": {"X": {"sku": "X"}}}})
        assert await one.state() == before
        with pytest.raises(UnknownToolError):
            await one.call_tool("load_scenario", {"scenario": {}})


async def test_hidden_hooks_are_not_tools(tmp_path: Path) -> None:
    env = ef.environment(EF / "inventory_tools.py", EF / "inventory_tools.json")
    for hook in ("load_scenario", "save_scenario"):
        assert hook not in env.tools
        with pytest.raises(UnknownToolError):
            env.instance().call_tool(hook, {})


def test_the_module_imports_unchanged_under_mcp_2(tmp_path: Path) -> None:
    module = ef.load_module(EF / "inventory_tools.py")
    assert sorted(module.mcp.tools) == ["add_item", "list_items", "place_order", "restock"]
    with pytest.raises(RuntimeError, match="served by envreg"):
        module.mcp.run(transport="stdio")
    import sys

    assert "mcp.server.fastmcp" not in sys.modules, "the stand-in name is gone once the file is imported"


def test_uuid4_is_reported_as_non_deterministic(tmp_path: Path) -> None:
    code, output = import_(tmp_path, "ticket_ids", "--scenarios", str(EF / "ticket_ids_scenarios"))
    assert code == 1
    assert "fail: deterministic: open_two: call 1 (open_ticket) answered differently" in " ".join(
        output.split()
    )
    assert "fails the checks above" in output


def test_a_save_scenario_that_does_not_round_trip_is_reported(tmp_path: Path) -> None:
    code, output = import_(tmp_path, "lossy", "--scenarios", str(EF / "lossy_scenarios"))
    assert code == 1
    assert "changes on dump -> load -> dump at /scenario/nextId" in " ".join(output.split())
    assert 'expected {"id":"n2"}, got {"id":"n1"}' in " ".join(output.split())


def test_a_network_call_is_blocked_rolled_back_and_reported(tmp_path: Path) -> None:
    code, output = import_(tmp_path, "weather", "--scenarios", str(EF / "weather_scenarios"))
    flat = " ".join(output.split())
    assert code == 1
    assert "network: imports urllib.request" in flat
    assert "fail: no network:" in flat
    assert "network call blocked: tool 'fetch_forecast' tried to reach ('127.0.0.1', 9)" in flat
    env = load_environment(tmp_path / "images" / "weather-station")
    instance = env.instance({"scenario": {"readings": {"Oslo": 3.5}}})
    assert instance.call_tool("fetch_forecast", {"city": "Lima"}).is_error
    assert instance.state.to_json() == {"scenario": {"readings": {"Oslo": 3.5}}}, (
        "the write before the call is undone"
    )


def test_python_312_syntax_is_refused_with_the_line_and_the_reason(tmp_path: Path) -> None:
    tool = tmp_path / "modern_syntax_tools.py"
    shutil.copy(EF / "modern_syntax_tools.py312", tool)
    result = runner.invoke(
        app,
        [
            "import",
            "envfactory",
            str(tool),
            "--metadata",
            str(EF / "modern_syntax_tools.json"),
            "--images",
            str(tmp_path),
        ],
    )
    flat = " ".join(result.output.split())
    assert result.exit_code == 1
    assert "modern_syntax_tools.py line 3" in flat and "CPython 3.11" in flat and "TypeAlias" in flat
    assert not (tmp_path / "thermostat").exists(), "nothing is written for a file that cannot run"


def test_metadata_that_does_not_match_the_class_is_refused(tmp_path: Path) -> None:
    meta = json.loads((EF / "inventory_tools.json").read_text())
    meta["tools"].append({"name": "teleport", "description": "x", "input_schema": {"type": "object"}})
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(meta))
    with pytest.raises(ef.ImportProblem, match="'teleport' has no method of that name on InventoryManager"):
        ef.environment(EF / "inventory_tools.py", bad)
    meta["class_name"] = "Nope"
    bad.write_text(json.dumps(meta))
    with pytest.raises(ef.ImportProblem, match="defines no class 'Nope'"):
        ef.environment(EF / "inventory_tools.py", bad)


def test_shipped_scenarios_and_rejected_states_load(tmp_path: Path) -> None:
    code, output = import_(
        tmp_path,
        "inventory",
        "--seed",
        str(EF / "inventory_seed.json"),
        "--scenarios",
        str(EF / "inventory_scenarios"),
    )
    assert code == 0, output
    scenarios, rejected = load_scenarios(tmp_path / "images" / "inventory-manager")
    assert [s.name for s in scenarios] == ["catalog_changes", "order_and_restock"] and len(rejected) == 1
