"""Inside the sandbox: import a revision, list its tools, play and record its scenarios, try its rejected states.

`inspect_draft` runs in a container sandbox (`envreg.sandboxing.run_isolated`, no network, non-root), never
on the host: the module is compiled, imported with a time limit, its seed loaded, every scenario recorded
with `envreg.env.record.record` (``check=True``: what the model predicted must be what the calls give, each
call under `call_timeout`), every rejected state tried. It answers JSON: the environment's name, version and
tools, the recorded scenario files, and the failures (`envreg.envgen.report.Failure` fields).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from envreg.env.record import CallTimeout, deadline, record, scenario_text, traceback_tail

# what a recording problem is, as the check of `envreg validate` that would see it
CHECK_OF = {
    "unexpected_error": "scenarios.results",
    "succeeded": "scenarios.results",
    "error_text": "scenarios.results",
    "mismatch": "scenarios.results",
    "unknown_tool": "scenarios.results",
    "timeout": "envgen.hang",
    "final_state": "scenarios.final_states",
    "initial_state": "scenarios.initial_states",
    "id_counter": "scenarios.initial_states",
}


class Inspection(BaseModel):
    """The sandbox's answer, as the host reads it: the code that ran beside `inspect_draft` could have
    changed it, so its shape is checked and it may only fill in the draft's own scenario files."""

    model_config = ConfigDict(extra="forbid")

    imported: bool
    hung: bool
    name: str | None = None
    version: str | None = None
    tools: list[dict[str, Any]] = []
    recorded: dict[str, str] = {}
    failures: list[dict[str, Any]] = []

    @classmethod
    def read(cls, answer: Any, scenario_files: set[str]) -> Inspection:
        """`answer` checked; `ValueError` when it is not an inspection of the draft with these scenario files."""
        from envreg.envgen.report import Failure

        inspection = cls.model_validate(answer)
        for f in inspection.failures:
            Failure.model_validate(f)
        if stray := set(inspection.recorded) - scenario_files:
            raise ValueError(f"it records files the draft does not have: {', '.join(sorted(stray))}")
        return inspection


def _failure(check: str, message: str, **extra: Any) -> dict[str, Any]:
    return {
        "stage": "inspect",
        "check": check,
        "message": message,
        **{k: v for k, v in extra.items() if v is not None},
    }


def _import(folder: Path, timeout: float) -> tuple[Any, dict[str, Any] | None]:
    from envreg.env.loader import load_environment

    source = (folder / "env.py").read_text()
    try:
        compile(source, "env.py", "exec")
    except SyntaxError as exc:
        where = f"env.py, line {exc.lineno}" + (f": {exc.text.strip()}" if exc.text else "")
        return None, _failure(
            "envgen.import", f"SyntaxError: {exc.msg} ({where})", traceback=traceback_tail(exc)
        )
    try:
        with deadline(timeout):
            return load_environment(folder), None
    except CallTimeout as exc:
        return None, _failure(
            "envgen.hang",
            f"importing env.py did not finish within {timeout:g} s",
            traceback=traceback_tail(exc),
        )
    except BaseException as exc:  # the module's own code: whatever it raises is the report
        return None, _failure(
            "envgen.import",
            f"importing env.py failed: {type(exc).__name__}: {exc}",
            traceback=traceback_tail(exc),
        )


def inspect_draft(work: Path, payload: dict[str, Any]) -> dict[str, Any]:
    """The inspection of the environment folder ``work/<folder>`` (runs in a sandbox; see the module docstring)."""
    from pydantic import ValidationError

    from envreg.env import RejectedState, Scenario

    logging.getLogger("envreg.env").setLevel(logging.WARNING)
    folder = work / payload["folder"]
    call_timeout = float(payload.get("call_timeout", 10.0))
    answer: dict[str, Any] = {"imported": False, "hung": False, "tools": [], "recorded": {}, "failures": []}
    failures: list[dict[str, Any]] = answer["failures"]
    env, failure = _import(folder, call_timeout)
    if env is None:
        failures.append(failure)
        answer["hung"] = failure["check"] == "envgen.hang"
        return _relative(answer, folder)
    answer.update(imported=True, name=env.name, version=env.version)
    try:
        answer["tools"] = env.list_tools()
    except Exception as exc:  # a type hint pydantic cannot make a schema of
        failures.append(
            _failure(
                "envgen.import",
                f"the tools' schemas cannot be built: {type(exc).__name__}: {exc}",
                traceback=traceback_tail(exc),
            )
        )
        return _relative(answer, folder)
    try:
        env.initial_state()
    except Exception as exc:
        failures.append(_failure("envgen.seed", f"seed.json is refused: {_short(exc)}"))
    for path in sorted((folder / "scenarios").glob("*.json")):
        rel = path.relative_to(folder).as_posix()
        try:
            scenario = Scenario.model_validate_json(path.read_bytes())
        except ValidationError as exc:
            failures.append(_failure("envgen.files", f"{rel} is not a scenario: {_short(exc)}"))
            continue
        recording = record(env, scenario, check=True, call_timeout=call_timeout)
        for p in recording.problems:
            failures.append(
                _failure(
                    CHECK_OF[p.kind],
                    p.message,
                    scenario=p.scenario,
                    step=p.step,
                    tool=p.tool,
                    expected=p.expected,
                    got=p.got,
                    traceback=p.traceback,
                )
            )
        if any(p.kind == "timeout" for p in recording.problems):
            answer["hung"] = True
            continue
        answer["recorded"][rel] = scenario_text(recording.scenario)
    if not answer["recorded"] and not answer["hung"]:
        failures.append(
            _failure("envgen.files", "no scenario could be recorded: write scenarios/<name>.json files")
        )
    rejected = sorted((folder / "scenarios" / "rejected").glob("*.json"))
    if not rejected:
        failures.append(
            _failure("envgen.files", "no rejected states: write scenarios/rejected/<name>.json files")
        )
    for path in rejected:
        rel = path.relative_to(folder).as_posix()
        try:
            case = RejectedState.model_validate_json(path.read_bytes())
        except ValidationError as exc:
            failures.append(_failure("envgen.files", f"{rel} is not a rejected state: {_short(exc)}"))
            continue
        try:
            env.parse_state(case.state)
        except Exception as exc:
            if case.error not in str(exc):
                failures.append(
                    _failure(
                        "scenarios.initial_states",
                        f"rejected state {case.name}: refused, but the error does not contain {case.error!r}",
                        expected={"error": case.error},
                        got={"error": _short(exc)},
                    )
                )
        else:
            failures.append(
                _failure(
                    "scenarios.initial_states",
                    f"rejected state {case.name}: the state was accepted, it must be refused",
                    expected={"error": case.error},
                )
            )
    return _relative(answer, folder)


def _short(exc: BaseException, limit: int = 600) -> str:
    text = " ".join(line.strip() for line in str(exc).splitlines() if "errors.pydantic.dev" not in line)
    return text[:limit]


def _relative(answer: dict[str, Any], folder: Path) -> dict[str, Any]:
    """The answer with the sandbox's folder path cut out of tracebacks and messages (``env.py``, line 12)."""
    text = json.dumps(answer, ensure_ascii=False).replace(f"{folder}/", "")
    return json.loads(text)
