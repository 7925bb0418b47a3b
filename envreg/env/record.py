"""Recording a scenario: play its calls on an in-process instance and write down what they gave.

`record(env, scenario)` runs the steps on the local tier and returns the scenario with each successful
call's `expect` and the `final_state` filled in. A call that errors must be marked `expect_error` (a
substring of its message; ``""`` records the whole message), and a call so marked must fail: anything
else is a `Problem`, and a scenario with problems is not written. With ``check=True`` the results the
file already states (`expect`, `final_state`) must also be what the calls give: that is how EnvGen holds
a generated environment to the results its author predicted.

The id convention (`EnvState.new_id`): ``id_counters[prefix]`` is the number of the last id handed out
for ``prefix``, so ``new_id("evt")`` gives ``evt_<counter + 1>`` (``evt_0007``: four digits at least).
A state holding ``evt_0007`` needs ``id_counters["evt"] >= 7``, or new ids collide with old ones; the
recorder refuses an initial state that breaks it for a prefix its calls use.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import signal
import threading
import traceback
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, cast

from envreg.env.environment import Environment
from envreg.env.scenario import CallOutcome, Scenario, state_digest, states_equal, strip_volatile
from envreg.errors import UnknownToolError

PACKAGE = str(Path(__file__).resolve().parent.parent)


class CallTimeout(BaseException):
    """A tool call (or an import) ran past its time; a BaseException, so that no ``except Exception`` in
    the tool (or the SDK, which turns a tool's exceptions into error results) swallows it."""


@dataclass(frozen=True)
class Problem:
    """Why a scenario cannot be recorded (or, with ``check=True``, does not hold), for one step or all of it.

    `kind` is one of ``unexpected_error``, ``succeeded`` (marked `expect_error`, but it did not fail),
    ``error_text``, ``mismatch``, ``final_state``, ``timeout``, ``unknown_tool``, ``initial_state`` and
    ``id_counter``; `step` counts from 1 (None: the scenario as a whole).
    """

    scenario: str
    kind: str
    message: str
    step: int | None = None
    tool: str | None = None
    expected: Any = None
    got: Any = None
    traceback: str | None = None

    def __str__(self) -> str:
        where = f"step {self.step} ({self.tool})" if self.step else "scenario"
        return f"{self.scenario}, {where}: {self.message}"

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}


@dataclass
class Recording:
    """The scenario as recorded (results and final state written in) and what stood in the way."""

    scenario: Scenario
    problems: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


# ------------------------------------------------------------------------------------- time limits
def _on_alarm(signum: int, frame: Any) -> None:
    raise CallTimeout()


@contextlib.contextmanager
def deadline(seconds: float | None) -> Iterator[None]:
    """Raise `CallTimeout` in this thread after `seconds` (again every second, should the code catch it).

    Only the main thread of a process can take signals: elsewhere (or with None) there is no limit."""
    if not seconds or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds, 1.0)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# --------------------------------------------------------------------------------------- tracebacks
def traceback_tail(exc: BaseException, frames: int = 3) -> str:
    """The last `frames` frames of `exc`'s traceback in the environment's own code, and the exception line."""
    stack = [f for f in traceback.extract_tb(exc.__traceback__) if _own(f.filename)]
    if isinstance(exc, SyntaxError):
        lines = traceback.format_exception_only(type(exc), exc)
    else:
        lines = traceback.format_list(stack[-frames:]) + traceback.format_exception_only(type(exc), exc)
    return "".join(lines).rstrip()


def _own(filename: str) -> bool:
    """Whether a frame is the environment's code: not envreg's, not an installed package's, not frozen."""
    return not (
        filename.startswith((PACKAGE, "<")) or "site-packages" in filename or "dist-packages" in filename
    )


class _Raised(logging.Handler):
    """Keeps the traceback tail of the last exception a tool raised (the SDK logs it, then answers an error)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.last: str | None = None

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info and record.exc_info[1] is not None:
            self.last = traceback_tail(record.exc_info[1])


@contextlib.contextmanager
def tool_tracebacks() -> Iterator[_Raised]:
    logger = logging.getLogger("envreg.env")
    handler = _Raised()
    logger.addHandler(handler)
    propagate, logger.propagate = logger.propagate, False  # the traceback is reported, not printed
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate


# ----------------------------------------------------------------------------------------- ids
def id_counter_problems(initial: Any, final: Any) -> list[str]:
    """Prefixes the calls drew ids for (their counter moved) whose ids in `initial` lie beyond its counter."""
    before = (initial or {}).get("id_counters") or {}
    after = (final or {}).get("id_counters") or {}
    used = [p for p, n in sorted(after.items()) if n != before.get(p, 0)]
    if not used:
        return []
    found: dict[str, list[int]] = {}
    pattern = re.compile(rf"^({'|'.join(map(re.escape, used))})_(\d+)$")

    def scan(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                scan(key)
                scan(value)
        elif isinstance(node, list):
            for item in node:
                scan(item)
        elif isinstance(node, str) and (m := pattern.match(node)):
            found.setdefault(m.group(1), []).append(int(m.group(2)))

    scan({k: v for k, v in initial.items() if k != "id_counters"})
    problems = []
    for prefix, numbers in sorted(found.items()):
        counter = before.get(prefix, 0)
        if max(numbers) > counter:
            problems.append(
                f"the initial state holds {prefix}_{max(numbers):04d} but id_counters[{prefix!r}] is {counter}: "
                f"new_id({prefix!r}) hands out {prefix}_{counter + 1:04d} next, so new ids collide with old ones; "
                f"set id_counters[{prefix!r}] to at least {max(numbers)} (the number of the last id handed out)"
            )
    return problems


# ------------------------------------------------------------------------------------ recording
def _initial(env: Environment, scenario: Scenario) -> dict[str, Any]:
    if scenario.initial_state is not None:
        return scenario.initial_state
    return env.initial_state().to_json()


def record(
    env: Environment, scenario: Scenario, *, check: bool = False, call_timeout: float | None = None
) -> Recording:
    """Play `scenario` on a new in-process instance; return it with its results and final state written in.

    Each instance starts from its own parse of the initial state (never the shared committed seed), so a
    call cut short by `call_timeout` cannot leave anything behind for the next scenario."""
    problems: list[Problem] = []
    name = scenario.name
    try:
        initial = _initial(env, scenario)
        instance = env.instance(initial)
    except Exception as exc:
        problems.append(Problem(name, "initial_state", f"the initial state is refused: {_first_line(exc)}"))
        return Recording(scenario, problems)
    steps: list[dict[str, Any]] = []
    with tool_tracebacks() as raised:
        for i, step in enumerate(scenario.steps, 1):

            def problem(kind: str, message: str, **extra: Any) -> None:
                problems.append(Problem(name, kind, message, i, step.tool, **extra))  # noqa: B023

            raised.last = None
            try:
                with deadline(call_timeout):
                    result = instance.call_tool(step.tool, step.arguments)
            except UnknownToolError as exc:
                problem("unknown_tool", exc.message)
                steps.append(step.model_dump(mode="json", exclude_unset=True))
                continue
            except CallTimeout as exc:
                problem(
                    "timeout",
                    f"the call did not return within {call_timeout:g} s (it was stopped)",
                    traceback=traceback_tail(exc),
                )
                return Recording(scenario, problems)
            outcome = CallOutcome(result.is_error, result.text)
            written: dict[str, Any] = {"tool": step.tool, "arguments": step.arguments}
            if step.expect_error is not None:
                if not result.is_error:
                    problem(
                        "succeeded",
                        f"marked expect_error {step.expect_error!r}, but the call succeeded",
                        expected={"error": step.expect_error},
                        got=outcome.value(),
                    )
                elif step.expect_error not in result.text:
                    problem(
                        "error_text",
                        f"the error does not contain {step.expect_error!r}",
                        expected={"error": step.expect_error},
                        got={"error": result.text},
                    )
                written["expect_error"] = step.expect_error or result.text
            elif result.is_error:
                problem(
                    "unexpected_error",
                    f"the call failed: {result.text}",
                    got={"error": result.text},
                    traceback=raised.last,
                )
            else:
                value = outcome.value()
                if check and "expect" in step.model_fields_set and value != step.expect:
                    problem("mismatch", "the result is not the expected one", expected=step.expect, got=value)
                    value = (
                        step.expect
                    )  # the author's prediction stays in the file, for the image to be judged by
                written["expect"] = value
            steps.append(written)
    final = instance.state.to_json()
    if (
        check
        and scenario.final_state is not None
        and not states_equal(final, scenario.final_state, env.volatile)
    ):
        from envreg.validate.jsondiff import describe

        vol = env.volatile
        problems.append(
            Problem(
                name,
                "final_state",
                "the final state is not the expected one: "
                + describe(
                    strip_volatile(scenario.final_state, vol), strip_volatile(final, vol), ("expected", "got")
                ),
            )
        )
    if (
        check
        and scenario.final_state is None
        and scenario.final_state_sha256
        and (got := state_digest(final, env.volatile)) != scenario.final_state_sha256
    ):
        problems.append(
            Problem(
                name,
                "final_state",
                f"the final state's sha256 is {got}, expected {scenario.final_state_sha256}",
            )
        )
    for message in id_counter_problems(initial, final):
        problems.append(Problem(name, "id_counter", message))
    data = scenario.model_dump(mode="json", exclude_unset=True)
    data["steps"] = steps
    if scenario.final_state is None and scenario.final_state_sha256:  # stated by its digest: kept that way
        data["final_state_sha256"] = state_digest(final, env.volatile)
    else:
        data["final_state"] = final
    return Recording(Scenario.model_validate(data), problems)


def _first_line(exc: BaseException) -> str:
    errors = getattr(exc, "errors", None)
    if callable(errors):
        with contextlib.suppress(Exception):
            first = cast(list[dict[str, Any]], errors(include_url=False))[0]
            where = ".".join(str(p) for p in first.get("loc", ())) or "state"
            return f"{where}: {first['msg']}"
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def scenario_text(scenario: Scenario) -> str:
    """A scenario in its file form: the fields it sets, in the model's order, two-space JSON."""
    data = scenario.model_dump(mode="json", exclude_unset=True)
    ordered = {k: data[k] for k in Scenario.model_fields if k in data}
    return json.dumps(ordered, indent=2, ensure_ascii=False) + "\n"


def record_folder(work: Path, payload: dict[str, Any]) -> list[dict[str, Any]]:
    """`record` for every scenario in `payload` on the environment folder ``work/<folder>``: what runs in a
    container sandbox (`envreg.sandboxing.run_isolated`) when the folder holds foreign code."""
    from envreg.env.loader import load_environment

    logging.getLogger("envreg.env").setLevel(logging.ERROR)
    env = load_environment(work / payload["folder"])
    out = []
    for data in payload["scenarios"]:
        recording = record(
            env,
            Scenario.model_validate(data),
            check=payload.get("check", False),
            call_timeout=payload.get("timeout"),
        )
        out.append(
            {
                "scenario": recording.scenario.model_dump(mode="json", exclude_unset=True),
                "problems": [p.to_json() for p in recording.problems],
            }
        )
    return out
