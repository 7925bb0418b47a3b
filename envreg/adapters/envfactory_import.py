"""`envreg import envfactory`: inspect a tool file in a container sandbox, then write its environment folder.

`inspect_tool_file` runs inside the sandbox (`envreg.sandboxing.run_isolated`): it imports the file,
finds what it serves (`envreg.adapters.envfactory.serve`), checks that the seed survives
``save_scenario`` -> ``load_scenario`` -> ``save_scenario``, records a scenario from the seed (one call
of every tool, arguments taken from the seed where a value of that name is there), replays it twice to
find tools whose results or states differ between runs (``uuid4`` ids, the clock, unseeded randomness:
reported, and left out of the recorded scenario so that `envreg validate` can run it), and runs the
in-process checks on the given scenarios. It returns a JSON report; the host (`write_folder`) copies
the files byte for byte into the folder, nothing outside it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from envreg.canonical import canonical_json
from envreg.env import Environment, RejectedState, Scenario
from envreg.env.scenario import CallOutcome
from envreg.protocol import FOREIGN_MARKER

RECORDED = "recorded_from_seed"


# ------------------------------------------------------------------------------------ arguments
def _values_named(node: Any, name: str, found: list[Any]) -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == name and not isinstance(value, dict | list):
                found.append(value)
            _values_named(value, name, found)
    elif isinstance(node, list):
        for item in node:
            _values_named(item, name, found)


def _example(name: str, schema: dict[str, Any]) -> Any:
    if "enum" in schema:
        return schema["enum"][0]
    if "default" in schema:
        return schema["default"]
    for branch in schema.get("anyOf", []):
        if branch.get("type") != "null":
            return _example(name, branch)
    kind = schema.get("type")
    if kind == "integer":
        return 1
    if kind == "number":
        return 1.0
    if kind == "boolean":
        return True
    if kind == "array":
        return []
    if kind == "object":
        return {}
    return "2024-01-15" if "date" in name else "example"


def _fits(value: Any, schema: dict[str, Any]) -> bool:
    kinds = [schema.get("type")] + [b.get("type") for b in schema.get("anyOf", [])]
    return any(
        (k == "string" and isinstance(value, str))
        or (k == "integer" and isinstance(value, int) and not isinstance(value, bool))
        or (k == "number" and isinstance(value, int | float) and not isinstance(value, bool))
        or (k == "boolean" and isinstance(value, bool))
        or k is None
        for k in kinds
    )


def seed_arguments(tool: dict[str, Any], seed: Any) -> dict[str, Any]:
    """Arguments for one call of `tool` (MCP wire form) on `seed`: each required parameter gets the first
    value of that name found in the seed, else a plain example of its type."""
    schema = tool.get("inputSchema", {})
    arguments = {}
    for name in schema.get("required", []):
        prop = schema.get("properties", {}).get(name, {})
        found: list[Any] = []
        _values_named(seed, name, found)
        fitting = [v for v in found if _fits(v, prop)]
        arguments[name] = fitting[0] if fitting else _example(name, prop)
    return arguments


# ------------------------------------------------------------------------------------ recording
def _run(
    env: Environment, initial: dict[str, Any], calls: list[tuple[str, dict[str, Any]]]
) -> list[tuple[str, str]]:
    instance = env.instance(initial)
    trace = []
    for tool, arguments in calls:
        result = instance.call_tool(tool, arguments)
        trace.append((canonical_json([result.is_error, result.text]), instance.state.canonical(cached=False)))
    return trace


Calls = list[tuple[str, dict[str, Any]]]
Trace = list[tuple[str, str]]


def record_scenario(
    env: Environment, initial: dict[str, Any], elsewhere: Callable[[Calls], Trace] | None = None
) -> tuple[Scenario, list[dict[str, str]]]:
    """One call of each tool on `initial`, replayed twice (and by `elsewhere`: in another process, under
    another hash seed); calls whose result or state differs between the runs are left out (and returned,
    with what differed)."""
    seed = initial.get("scenario", initial)
    calls = [(t["name"], seed_arguments(t, seed)) for t in env.list_tools()]
    dropped: list[dict[str, str]] = []
    for (tool, _), (outcome, _) in zip(list(calls), _run(env, initial, calls), strict=True):
        if "network call blocked" in outcome:
            dropped.append({"tool": tool, "differs": "network"})
    calls = [c for c in calls if c[0] not in {d["tool"] for d in dropped}]
    while calls:
        first, second = _run(env, initial, calls), _run(env, initial, calls)
        runs = [(second, "")] + ([(elsewhere(calls), " under another hash seed")] if elsewhere else [])
        differing = [
            (i, other, where)
            for other, where in runs
            for i, (a, b) in enumerate(zip(first, other, strict=True))
            if a != b
        ]
        if not differing:
            break
        index, other, where = min(differing, key=lambda d: d[0])
        what = "result" if first[index][0] != other[index][0] else "state after it"
        dropped.append({"tool": calls[index][0], "differs": what + where})
        del calls[index]
    instance = env.instance(initial)
    steps = []
    for tool, arguments in calls:
        result = instance.call_tool(tool, arguments)
        step: dict[str, Any] = {"tool": tool, "arguments": arguments}
        if result.is_error:
            step["expect_error"] = result.text
        else:
            step["expect"] = CallOutcome(False, result.text).value()
        steps.append(step)
    scenario = Scenario(
        name=RECORDED,
        description="Recorded by `envreg import envfactory` from the seed: one call of each tool, arguments "
        "from the seed; tools whose results differ between two runs are left out.",
        initial_state=initial,
        steps=steps,
        final_state=instance.state.to_json(),
    )
    return scenario, dropped


def _hash_seed_elsewhere() -> str:
    """A hash seed other than this process's (`PYTHONHASHSEED`; unset or "random": any fixed one)."""
    mine = os.environ.get("PYTHONHASHSEED", "random")
    return str(int(mine) + 1) if mine.isdigit() else "0"


def other_process(tool_file: Path, metadata_file: Path, options: dict[str, Any], initial: dict[str, Any]):
    """A runner of `_run` in a new Python process under another hash seed (`hash()` of strings, the order
    of sets): what differs there would differ between two starts of the environment's server."""

    def run(calls: Calls) -> Trace:
        request = {
            "tool_file": str(tool_file),
            "metadata_file": str(metadata_file),
            "options": options,
            "initial": initial,
            "calls": calls,
        }
        environ = {
            **os.environ,
            "PYTHONHASHSEED": _hash_seed_elsewhere(),
            "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
        }
        done = subprocess.run(
            [sys.executable, "-m", "envreg.adapters.envfactory_import"],
            input=json.dumps(request),
            env=environ,
            capture_output=True,
            text=True,
            timeout=300,
        )
        if done.returncode != 0:
            raise RuntimeError(f"the replay in another process failed: {done.stderr.strip()[-400:]}")
        return [tuple(step) for step in json.loads(done.stdout)]  # type: ignore[misc]

    return run


def _replay_main() -> None:
    """`python -m envreg.adapters.envfactory_import`: `_run` of the request on stdin, the trace on stdout."""
    import logging

    from envreg.adapters import envfactory as ef

    logging.getLogger("envreg.env").setLevel(logging.ERROR)
    request = json.load(sys.stdin)
    served = ef.serve(Path(request["tool_file"]), Path(request["metadata_file"]), **request["options"])
    calls = [(tool, arguments) for tool, arguments in request["calls"]]
    json.dump(_run(served.env, request["initial"], calls), sys.stdout)


# ------------------------------------------------------------------------------ inside the sandbox
def _reason(exc: Exception) -> str:
    """A validation error in one line: its first problem, without pydantic's links."""
    errors = getattr(exc, "errors", None)
    text = errors()[0]["msg"] if callable(errors) and errors() else str(exc)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and "errors.pydantic.dev" not in ln]
    return " ".join(lines).removeprefix("Value error, ")[:400]


def inspect_tool_file(work: Path, payload: dict[str, Any]) -> dict[str, Any]:
    """The import report of the tool file in `work` (runs in a sandbox; see the module docstring)."""
    import logging

    from envreg.adapters import envfactory as ef
    from envreg.adapters.checks import check_environment, first_difference

    logging.getLogger("envreg.env").setLevel(logging.ERROR)
    tool_file, metadata_file = work / payload["tool"], work / payload["metadata"]
    options = {k: payload[k] for k in ("name", "version", "domain")}
    try:
        source = ef.check_syntax(tool_file)
        served = ef.serve(tool_file, metadata_file, **options)
    except ef.ImportProblem as exc:
        return {"ok": False, "problem": str(exc)}
    env, binding = served.env, served.binding
    report: dict[str, Any] = {
        "ok": True,
        "class": binding.cls.__name__,
        "object": binding.name,
        "metadata_class": served.metadata.class_name,
        "state": "scenario",
        "tools": [t["name"] for t in env.list_tools()],
        "notes": served.notes,
        "network": ef.network_imports(source),
    }
    seed = payload.get("seed")
    initial = {"scenario": seed} if seed is not None else env.seed
    try:
        first = env.parse_state(initial).to_json()
        again = env.parse_state(json.loads(canonical_json(first))).to_json()
    except ValueError as exc:
        refused = _reason(exc)
        # the file's load_scenario refuses the seed or what its own save_scenario wrote of it: where the
        # seed itself loads, the state is what the object holds (EnvFactory's server never reloads it)
        served = ef.serve(tool_file, metadata_file, **options, state="attributes")
        scenario_form = ef.ScenarioForm(served.binding)
        try:
            live = scenario_form.load(initial) if seed is not None else scenario_form.new()
            env, initial = served.env, ef.AttributeForm(served.binding).dump(live)
            first = env.parse_state(initial).to_json()
            again = env.parse_state(json.loads(canonical_json(first))).to_json()
        except ValueError:
            whose = (
                "the seed given" if seed is not None else "the state of a new object (its save_scenario())"
            )
            hint = "" if seed is not None else "; give a seed it loads (--seed)"
            return {**report, "ok": False, "problem": f"{whose} does not load: {refused}{hint}"}
        report["state"] = "attributes"
        report["notes"].append(
            f"its load_scenario refuses what its save_scenario writes ({refused}): the state is the object's "
            "attributes, rebuilt as they were"
        )
    if seed is not None:
        report["seed_state"] = initial
    report["round_trip"] = (
        None
        if canonical_json(first) == canonical_json(again)
        else f"save_scenario()'s output does not load back the same: it changes at {first_difference(first, again)}"
    )
    elsewhere = other_process(tool_file, metadata_file, {**options, "state": report["state"]}, first)
    recorded, dropped = record_scenario(env, first, elsewhere)
    report["recorded"] = recorded.model_dump(mode="json", exclude_none=True)
    report["nondeterministic"] = dropped
    scenarios = [Scenario.model_validate(s) for s in payload.get("scenarios", [])]
    for rejected in payload.get("rejected", []):
        RejectedState.model_validate(rejected)
    report["checks"] = [
        {"name": c.name, "passed": c.passed, "evidence": c.evidence}
        for c in check_environment(env, [*scenarios, recorded])
    ]
    return report


# ----------------------------------------------------------------------------------- on the host
ENV_PY = '''"""{cls}: an EnvFactory tool file ({tool}, {metadata}) served unchanged by envreg through its @mcp.tool functions.

Generated by `envreg import envfactory`; see envreg/adapters/envfactory.py. Foreign code: envreg imports it only
inside a container sandbox or its image ({marker}).
"""

from pathlib import Path

from envreg.adapters.envfactory import environment

HERE = Path(__file__).parent
env = environment(
    HERE / {tool!r}, HERE / {metadata!r}, name={name!r}, version={version!r}, domain={domain!r}{state}
)
'''


def write_folder(
    folder: Path,
    files: dict[str, bytes],
    *,
    tool: str,
    metadata: str,
    report: dict[str, Any],
    name: str,
    version: str,
    domain: str,
    seed: Any = None,
    scenarios: dict[str, bytes] | None = None,
) -> list[Path]:
    """Write the environment folder: `files` byte for byte, env.py, the foreign marker, seed.json, scenarios."""
    state = report.get("state", "scenario")
    folder.mkdir(parents=True, exist_ok=True)
    written = []

    def put(rel: str, data: bytes) -> None:
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        written.append(path)

    for rel, data in files.items():
        put(rel, data)
    put(
        "env.py",
        ENV_PY.format(
            cls=report["class"],
            tool=tool,
            metadata=metadata,
            name=name,
            version=version,
            domain=domain,
            state="" if state == "scenario" else f", state={state!r}",
            marker=FOREIGN_MARKER,
        ).encode(),
    )
    marker = {
        "kind": "envfactory",
        "tool_file": tool,
        "metadata": metadata,
        "class": report["class"],
        "state": state,
    }
    put(FOREIGN_MARKER, (json.dumps(marker, indent=2) + "\n").encode())
    if seed is not None:  # in the form the state is kept in (the report's, once the seed was loaded)
        seed_state = report.get("seed_state", {"scenario": seed})
        put("seed.json", (json.dumps(seed_state, indent=2, ensure_ascii=False) + "\n").encode())
    for rel, data in (scenarios or {}).items():
        put(f"scenarios/{rel}", data)
    recorded = json.dumps(report["recorded"], indent=2, ensure_ascii=False) + "\n"
    put(f"scenarios/{RECORDED}.json", recorded.encode())
    return written


if __name__ == "__main__":
    _replay_main()
