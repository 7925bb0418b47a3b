"""Files the console tests open: scored items, an executed record, a validation report, a tool graph."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from conftest import ROOT
from reward_helpers import as_tool_call_tags, executed_trajectory, scenario_truth

EVENT = {
    "calendar_id": "cal_0001",
    "title": "Console test",
    "start": "2026-03-03T07:00:00",
    "end": "2026-03-03T07:30:00",
}


def write_items(path: Path) -> list[dict[str, Any]]:
    """Two predictions for a bank record: every call (reward 1), and the first two (a partial one)."""
    bank = scenario_truth("bank", "pay_new_payee_chain")
    ok = [c for c in bank["calls"] if not c["is_error"]]
    items = [
        {"record": bank, "output": as_tool_call_tags(ok)},
        {"record": bank, "output": as_tool_call_tags(ok[:2])},
    ]
    path.write_text("".join(json.dumps(i) + "\n" for i in items))
    return items


def write_trajectory(path: Path) -> None:
    path.write_text(executed_trajectory("calendar", "book_meeting_with_contact").model_dump_json() + "\n")


def write_validation(path: Path) -> None:
    from envreg.validate.core import CheckResult, EnvReport, Status
    from envreg.validate.report import to_json

    report = EnvReport(target="console/calendar:1.0.0", name="calendar", version="1.0.0")
    report.results = [
        CheckResult("executable", Status.PASS, "the server answers", [], 0.5),
        CheckResult(
            "deterministic",
            Status.FAIL,
            "two runs differ",
            ["events.evt_0001.start: 1 (run 1) vs 2 (run 2)"],
            1.0,
        ),
    ]
    path.write_text(json.dumps(to_json([report], 1.5)))


def write_graph(path: Path) -> None:
    import networkx as nx

    from envreg.synth.graph import ToolGraph

    g = nx.DiGraph()
    for tool in ("list_calendars", "create_event", "delete_event"):
        g.add_node(f"calendar/{tool}", node="tool", env="calendar", domain="office", tool=tool)
    g.add_edge("calendar/list_calendars", "calendar/create_event", rel="chain")
    g.add_edge("calendar/create_event", "calendar/delete_event", rel="chain")
    ToolGraph(g, {"model": "test"}).save(path)


def reward_score_json(path: Path) -> list[dict[str, Any]]:
    """What `envreg reward score --json` prints for each item of `path`."""
    proc = subprocess.run(
        [sys.executable, "-m", "envreg.cli.main", "reward", "score", str(path), "--json"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line)["result"] for line in proc.stdout.splitlines()]
