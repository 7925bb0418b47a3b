"""Replay BFCL multi-turn ground truth through envreg sandboxes; score it with envreg and with BFCL's checker.

For each entry, the "model" calls (the ground truth, or a variant of it) go turn by turn to one
sandbox per involved class, on the chosen isolation tier (through MCP on the Docker tiers). envreg's
verdict uses envreg's own machinery: the expected run is the ground truth executed on in-process
`Instance`s, and after every turn whose ground truth is not empty the sandboxes' states must equal
the expected ones (canonical, volatile paths ignored) and the turn's expected results must all be
among the model's results so far, as BFCL's checker requires. BFCL's verdict is its own
`multi_turn_checker` on the same call strings, under a model name no other replay uses (it caches
instances in module globals keyed by model name and entry id; they are dropped after each entry).
"""

from __future__ import annotations

import ast
import copy
import importlib
import re
import secrets
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from envreg.adapters import bfcl
from envreg.canonical import canonical_json
from envreg.env import ToolResult, states_equal
from envreg.env.scenario import strip_volatile

Variant = Literal["ground-truth", "drop-last", "numbers-as-strings"]


@dataclass(frozen=True)
class Verdict:
    valid: bool
    reason: str = ""


@dataclass
class EntryResult:
    id: str
    category: str
    envreg: Verdict
    bfcl: Verdict
    calls: int = 0

    @property
    def agree(self) -> bool:
        return self.envreg.valid == self.bfcl.valid


@dataclass
class ReplayReport:
    isolation: str
    variant: str
    restore_each_turn: bool
    results: list[EntryResult] = field(default_factory=list)
    seconds: float = 0.0

    def by_category(self) -> dict[str, Counter[str]]:
        rows: dict[str, Counter[str]] = {}
        for r in self.results:
            row = rows.setdefault(r.category, Counter())
            row["entries"] += 1
            row["calls"] += r.calls
            row["envreg valid"] += r.envreg.valid
            row["bfcl valid"] += r.bfcl.valid
            row["agree"] += r.agree
        return rows

    @property
    def disagreements(self) -> list[EntryResult]:
        return [r for r in self.results if not r.agree]


def model_turns(entry: bfcl.Entry, variant: Variant) -> list[list[str]]:
    """The calls replayed as the model's: the ground truth, it without its very last call, or it with every
    number argument written as a string (``set_budget_limit(budget_limit='2857.14')``)."""
    turns = [list(turn) for turn in entry.ground_truth]
    if variant == "drop-last":
        last = max((i for i, turn in enumerate(turns) if turn), default=None)
        if last is not None:
            turns[last].pop()
    elif variant == "numbers-as-strings":
        turns = [[numbers_as_strings(call) for call in turn] for turn in turns]
    return turns


def numbers_as_strings(source: str) -> str:
    """A call string with each argument that is a number literal written as a string instead."""
    node = ast.parse(source.strip(), mode="eval")
    call = node.body
    if not isinstance(call, ast.Call):
        return source

    def quoted(arg: ast.expr) -> ast.expr:
        if isinstance(arg, ast.Constant) and type(arg.value) in (int, float):
            return ast.Constant(str(arg.value))
        if (
            isinstance(arg, ast.UnaryOp)
            and isinstance(arg.op, ast.USub)
            and isinstance(arg.operand, ast.Constant)
        ):
            return ast.Constant(f"-{arg.operand.value}")
        return arg

    call.args = [quoted(a) for a in call.args]
    for keyword in call.keywords:
        keyword.value = quoted(keyword.value)
    return ast.unparse(node)


def has_numbers(entry: bfcl.Entry) -> bool:
    """Whether some ground-truth call of `entry` passes a number literal (what `numbers-as-strings` changes)."""
    return any(
        numbers_as_strings(c) != ast.unparse(ast.parse(c.strip(), mode="eval"))
        for t in entry.ground_truth
        for c in t
    )


def outcome(result: ToolResult) -> str:
    """A call's result in the one form both runs are compared in."""
    return canonical_json(["error", result.error] if result.is_error else ["ok", result.value])


def _first_difference(a: Any, b: Any, where: str = "") -> str:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            if key not in a or key not in b or canonical_json(a[key]) != canonical_json(b[key]):
                return _first_difference(a.get(key), b.get(key), f"{where}/{key}")
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            if canonical_json(x) != canonical_json(y):
                return _first_difference(x, y, f"{where}/{i}")
    return where or "/"


# --------------------------------------------------------------------------- BFCL's module globals
_pristine: dict[tuple[str, str], Any] | None = None


def reset_bfcl_globals() -> None:
    """Put the module-level data of BFCL's class files back as a fresh import has it.

    Some methods write module globals (a long-context weather reading) and long-context objects
    share the extension dicts with their module, so one entry's run can change the next one's
    start in a shared process; a container starts fresh every time. Containers are mutated in place,
    since the class modules hold references to them.
    """
    global _pristine
    modules = [
        importlib.import_module(bfcl._bfcl()[1].CLASS_FILE_PATH_MAPPING[name]) for name in bfcl.CLASSES
    ]
    modules.append(importlib.import_module(f"{bfcl._bfcl()[1].BACKEND_PATH_PREFIX}.long_context"))
    if _pristine is None:
        _pristine = {
            (m.__name__, k): copy.deepcopy(v)
            for m in modules
            for k, v in vars(m).items()
            if k.isupper() and isinstance(v, dict | list)
        }
        return
    for (module_name, key), value in _pristine.items():
        live = getattr(importlib.import_module(module_name), key)
        if live == value:
            continue
        fresh = copy.deepcopy(value)
        if isinstance(live, dict):
            live.clear()
            live.update(fresh)
        else:
            live[:] = fresh


def bfcl_verdict(entry: bfcl.Entry, turns: list[list[str]], model_name: str) -> Verdict:
    """BFCL's `multi_turn_checker` on the replayed call strings, its instance cache cleared after."""
    from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker

    decoded = [[turn] if turn else [] for turn in turns]
    reset_bfcl_globals()
    try:
        result = multi_turn_checker(
            decoded, entry.ground_truth, entry.raw, f"multi_turn_{entry.category}", model_name
        )
    finally:
        prefix = re.sub(r"[-./:]", "_", model_name)
        for key in [k for k in vars(multi_turn_utils) if k.startswith(prefix)]:
            del vars(multi_turn_utils)[key]
        reset_bfcl_globals()
    return Verdict(bool(result["valid"]), "" if result["valid"] else result.get("error_type", "invalid"))


# ------------------------------------------------------------------------------------------ replay
@dataclass
class _Expected:
    """The ground truth executed on in-process instances: per turn, each class's state and the results."""

    states: list[dict[str, dict[str, Any]]]
    results: list[list[str]]


def expected_run(
    entry: bfcl.Entry, initial: dict[str, dict[str, Any]], coercion: bfcl.Coercion = "bfcl"
) -> _Expected:
    reset_bfcl_globals()
    instances = {c: bfcl.environment(c, coercion).instance(initial[c]) for c in entry.classes}
    states, results = [], []
    for turn in entry.ground_truth:
        turn_results = []
        for source in turn:
            owner, call = bfcl.parse_call(source, entry.classes)
            turn_results.append(outcome(instances[owner].call_tool(call.tool, call.arguments)))
        results.append(turn_results)
        states.append({c: i.state.to_json() for c, i in instances.items()})
    return _Expected(states, results)


class Replayer:
    """Replays entries on one runtime and tier; one fresh BFCL model name per replayer."""

    def __init__(
        self,
        runtime: Any,
        isolation: str = "local",
        *,
        variant: Variant = "ground-truth",
        restore_each_turn: bool = False,
        coercion: bfcl.Coercion = "bfcl",
    ) -> None:
        if coercion != "bfcl" and isolation != "local":
            raise ValueError(
                f"the bfcl-* images serve coercion 'bfcl'; replay coercion {coercion!r} on the local tier"
            )
        self.rt = runtime
        self.isolation = isolation
        self.variant = variant
        self.restore_each_turn = restore_each_turn
        self.coercion = coercion
        self.model_name = f"envreg_replay_{secrets.token_hex(4)}"

    def env_ref(self, class_name: str) -> Any:
        if self.isolation == "local":
            return bfcl.environment(class_name, self.coercion)
        return bfcl.env_name(class_name)

    async def replay(self, entry: bfcl.Entry) -> EntryResult:
        turns = model_turns(entry, self.variant)
        reset_bfcl_globals()
        initial = {c: bfcl.initial_state(c, entry.initial_config, entry.long_context) for c in entry.classes}
        expected = expected_run(entry, initial, self.coercion)
        verdict, calls = await self._envreg_verdict(entry, turns, initial, expected)
        return EntryResult(
            entry.id, entry.category, verdict, bfcl_verdict(entry, turns, self.model_name), calls
        )

    async def _envreg_verdict(
        self,
        entry: bfcl.Entry,
        turns: list[list[str]],
        initial: dict[str, dict[str, Any]],
        expected: _Expected,
    ) -> tuple[Verdict, int]:
        sandboxes = {}
        try:
            for c in entry.classes:
                sandboxes[c] = await self.rt.sandbox(
                    self.env_ref(c), isolation=self.isolation, state=initial[c]
                )
            seen: list[str] = []
            calls = 0
            for index, (turn, truth) in enumerate(zip(turns, entry.ground_truth, strict=True)):
                for source in turn:
                    owner, call = bfcl.parse_call(source, entry.classes)
                    seen.append(outcome(await sandboxes[owner].call_tool(call.tool, call.arguments)))
                    calls += 1
                if self.restore_each_turn:
                    for c, sb in list(sandboxes.items()):
                        snap = await sb.snapshot()
                        sandboxes[c] = await self.rt.sandbox(
                            self.env_ref(c), isolation=self.isolation, state=snap
                        )
                        await sb.close()
                if not truth:
                    continue  # a turn the model should not act in: BFCL checks it no further
                if not turn:
                    return Verdict(
                        False, f"turn {index}: no call where the ground truth has {len(truth)}"
                    ), calls
                for c, sb in sandboxes.items():
                    state = await sb.state()
                    want = expected.states[index][c]
                    if not states_equal(state, want, bfcl.VOLATILE):
                        where = _first_difference(
                            strip_volatile(state, bfcl.VOLATILE), strip_volatile(want, bfcl.VOLATILE)
                        )
                        return Verdict(False, f"turn {index}: {c} state differs at {where}"), calls
                missing = Counter(expected.results[index]) - Counter(seen)
                if missing:
                    first = next(iter(missing))
                    return Verdict(False, f"turn {index}: expected result missing: {first[:120]}"), calls
            return Verdict(True), calls
        finally:
            for sb in sandboxes.values():
                await sb.close()


async def replay_all(
    runtime: Any,
    entries: list[bfcl.Entry],
    *,
    isolation: str = "local",
    variant: Variant = "ground-truth",
    restore_each_turn: bool = False,
    coercion: bfcl.Coercion = "bfcl",
    concurrency: int = 1,
    progress: Callable[[EntryResult], None] | None = None,
) -> ReplayReport:
    """Replay `entries` (up to `concurrency` at once) and collect both verdicts for each."""
    import anyio

    replayer = Replayer(
        runtime, isolation, variant=variant, restore_each_turn=restore_each_turn, coercion=coercion
    )
    report = ReplayReport(isolation, variant, restore_each_turn)
    started = time.perf_counter()
    queue = list(entries)
    results: dict[str, EntryResult] = {}

    async def worker() -> None:
        while queue:
            entry = queue.pop(0)
            result = await replayer.replay(entry)
            results[entry.id] = result
            if progress is not None:
                progress(result)

    async with anyio.create_task_group() as tg:
        for _ in range(max(1, concurrency)):
            tg.start_soon(worker)
    report.results = [results[e.id] for e in entries]
    report.seconds = time.perf_counter() - started
    return report
