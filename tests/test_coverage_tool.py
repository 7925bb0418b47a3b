"""scripts/coverage: a server the tests fork from the warm interpreter saves what it ran when SIGTERM ends it,
and scripts/coverage-table sums packages and names the lines a baseline covered that a run no longer does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import COUNTER, ROOT

import envreg.http.serving

START_AND_TERMINATE = f"""
import sys
sys.path.insert(0, {str(ROOT / "tests")!r})
from servers import EnvServerProcess

if __name__ == "__main__":
    server = EnvServerProcess({COUNTER!r}).start()
    server.proc.terminate()
    print(server.proc.wait(30))
"""


def test_a_forked_server_ended_by_sigterm_saves_what_it_ran(tmp_path: Path) -> None:
    import coverage

    rc = tmp_path / "coveragerc"
    rc.write_text(  # what scripts/coverage writes
        f"[run]\nsource = {ROOT / 'envreg'}\nparallel = true\nconcurrency = thread, multiprocessing\n"
        f"sigterm = true\ndata_file = {tmp_path / 'data'}\n"
    )
    script = tmp_path / "start_and_terminate.py"
    script.write_text(START_AND_TERMINATE)
    run = subprocess.run(
        [sys.executable, str(script)],
        env={**os.environ, "COVERAGE_PROCESS_START": str(rc)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["-15"], "the server still dies of the signal, as it does unmeasured"
    measured = coverage.Coverage(config_file=str(rc))
    measured.combine()
    serving = Path(envreg.http.serving.__file__).resolve()
    source = serving.read_text().splitlines()
    # only the server reaches this line: SignalStop raising the SIGTERM it caught, after its shutdown
    reraise = next(n for n, line in enumerate(source, 1) if "signal.raise_signal(signum)" in line)
    assert reraise in (measured.get_data().lines(str(serving)) or [])


def _report(path: Path, files: dict[str, tuple[list[int], list[int]]]) -> Path:
    """A `coverage json` report: file -> (executed lines, missing lines)."""
    entries = {
        f"/checkout/{name}": {
            "executed_lines": hit,
            "missing_lines": miss,
            "summary": {"covered_lines": len(hit), "num_statements": len(hit) + len(miss)},
        }
        for name, (hit, miss) in files.items()
    }
    path.write_text(json.dumps({"files": entries}))
    return path


def test_the_table_names_what_a_run_lost_in_unchanged_files(tmp_path: Path) -> None:
    before = _report(
        tmp_path / "before.json",
        {
            "envreg/runtime/gateway.py": ([1, 2, 3, 4, 5], [6]),
            "envreg/runtime/lane.py": ([1, 2], [3]),
            "envreg/config.py": ([1], [2]),
        },
    )
    now = _report(
        tmp_path / "now.json",
        {
            "envreg/runtime/gateway.py": ([1, 2, 5, 6], [3, 4]),  # same statements, 3-4 no longer run
            "envreg/runtime/lane.py": ([1, 2, 3, 4], []),  # changed: a line more
            "envreg/config.py": ([1, 2], []),
        },
    )
    table = subprocess.run(
        [sys.executable, str(ROOT / "scripts/coverage-table"), str(now), str(before)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rows = {line[:28].strip(): line[28:].split() for line in table.splitlines() if line.startswith("envreg")}
    assert rows["envreg/runtime"][:2] == ["8/10", "(80.0"] and rows["envreg/runtime"][3:5] == ["7/9", "(77.8"]
    assert rows["envreg (top level)"][0] == "2/2"
    assert "2 files have the same statements in both" in table
    assert "  envreg/runtime/gateway.py: 3-4" in table.splitlines()
    assert "lane.py:" not in table and "config.py:" not in table
