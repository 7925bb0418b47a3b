"""`Task`: what one episode plays: environments, where they start, the user's turns and the oracle.

A task comes from a catalog scenario (`Task.from_scenario`: the scenario's description is the user
turn, its steps executed in process are the oracle), from a synthesized trajectory record
(`Task.from_trajectory`: its queries, calls and per-turn states), or from a row of the RL export
(`Task.from_rl_row`). `load_tasks` reads a file of either records or tasks, or the scenarios of
named environments. The oracle is what the composite reward (`envreg.reward`) scores against: the
whole episode with `truth()`, one turn with `turn_truth(k)`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, model_validator

from envreg.env import Environment, Scenario, load_environment, load_scenarios
from envreg.env.augment import Augmentation
from envreg.errors import BadRequest
from envreg.reward.truth import GroundTruth, TruthCall
from envreg.synth.export import SYSTEM_PROMPT
from envreg.synth.records import Trajectory, function_name


class TaskTurn(BaseModel):
    """One user message, the oracle's calls that answer it and (when known) each state after them."""

    model_config = ConfigDict(extra="forbid")

    user: str = Field(min_length=1, max_length=100_000)
    calls: list[TruthCall] = Field(default_factory=list)
    states: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="Each environment's oracle state after the turn ({}: unknown)."
    )


class Task(BaseModel):
    """An episode to play and the oracle to score it against."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1, max_length=300)
    envs: list[str] = Field(min_length=1)
    domains: dict[str, str] = Field(default_factory=dict, description="Environment -> catalog domain.")
    initial_states: dict[str, dict[str, Any]]
    snapshot_ids: dict[str, str] = Field(
        default_factory=dict, description="Start an environment from this stored snapshot instead."
    )
    turns: list[TaskTurn] = Field(min_length=1)
    final_states: dict[str, dict[str, Any]]
    volatile: dict[str, list[str]] = Field(default_factory=dict)
    augmentation: dict[str, Augmentation] = Field(default_factory=dict)
    system: str = SYSTEM_PROMPT
    source: str = Field(default="", description="Where the task came from (scenario, record, file).")
    _snapshots: dict[tuple[str, str, int], Any] = PrivateAttr(default_factory=dict)

    @model_validator(mode="after")
    def _complete(self) -> Task:
        for field in ("initial_states", "final_states"):
            missing = [e for e in self.envs if e not in getattr(self, field)]
            if missing:
                raise ValueError(f"{field} lacks {', '.join(missing)}")
        unknown = sorted({c.env for t in self.turns for c in t.calls} - set(self.envs))
        if unknown:
            raise ValueError(f"oracle calls name environments the task does not have: {unknown}")
        return self

    # the oracle ---------------------------------------------------------------------------------
    def function_name(self, env: str, tool: str) -> str:
        """The name the model sees: ``tool`` with one environment, ``env__tool`` with several."""
        return function_name(env, tool, self.envs)

    def truth(self) -> GroundTruth:
        """The whole episode's oracle, for `envreg.reward.Scorer`."""
        return GroundTruth(
            id=self.id,
            envs=self.envs,
            calls=[c for t in self.turns for c in t.calls],
            initial_states=self.initial_states,
            final_states=self.final_states,
            volatile=self.volatile,
            augmentation=self.augmentation,
        )

    def states_before(self, k: int) -> dict[str, dict[str, Any]] | None:
        if k == 0:
            return self.initial_states
        return self.turns[k - 1].states or None

    def states_after(self, k: int) -> dict[str, dict[str, Any]] | None:
        if k == len(self.turns) - 1:
            return self.final_states
        return self.turns[k].states or None

    def turn_truth(self, k: int) -> GroundTruth | None:
        """Turn `k`'s oracle from the oracle's state before it; None when its states are not known."""
        if len(self.turns) == 1:
            return self.truth()
        before, after = self.states_before(k), self.states_after(k)
        if before is None or after is None:
            return None
        return GroundTruth(
            id=f"{self.id}#{k}",
            envs=self.envs,
            calls=self.turns[k].calls,
            initial_states=before,
            final_states=after,
            volatile=self.volatile,
            augmentation=self.augmentation,
        )

    # sources ------------------------------------------------------------------------------------
    @classmethod
    def from_scenario(cls, environment: Environment, scenario: Scenario) -> Task:
        """A catalog scenario: its description is the user's turn, its steps (run in process) the oracle."""
        name = environment.name
        initial = scenario.initial_state or environment.initial_state().to_json()
        oracle = environment.instance(initial)
        calls = []
        for step in scenario.steps:
            outcome = oracle.call_tool(step.tool, step.arguments)
            calls.append(
                TruthCall(env=name, tool=step.tool, arguments=step.arguments, is_error=outcome.is_error)
            )
        return cls(
            id=f"{name}/{scenario.name}",
            envs=[name],
            domains={name: environment.domain or ""},
            initial_states={name: initial},
            turns=[TaskTurn(user=scenario.description or scenario.name, calls=calls)],
            final_states={name: scenario.final_state or oracle.state.to_json()},
            volatile={name: list(environment.volatile)},
            source=f"scenario {name}/{scenario.name}",
        )

    @classmethod
    def from_trajectory(cls, record: Trajectory, domains: dict[str, str] | None = None) -> Task:
        """A synthesized trajectory record: its queries, calls and per-turn states."""
        turns = [
            TaskTurn(
                user=turn.query,
                calls=[TruthCall.model_validate(c.model_dump()) for c in turn.calls],
                states=turn.states,
            )
            for turn in record.turns
        ]
        envs = [e.name for e in record.envs]
        return cls(
            id=record.id,
            envs=envs,
            domains={e: d for e, d in (domains or {}).items() if e in envs},
            initial_states=record.initial_states,
            turns=turns,
            final_states=record.final_states,
            volatile=record.volatile,
            augmentation=record.meta.get("augmentation") or {},
            source=f"trajectory {record.id}",
        )

    @classmethod
    def from_rl_row(cls, row: dict[str, Any]) -> Task:
        """A row of the RL export (``rl.parquet``): its last user message and ground truth, its states."""
        extra = row.get("extra_info") or {}

        def value(key: str) -> Any:
            item = extra.get(key)
            return json.loads(item) if isinstance(item, str) else item

        prompt = list(row.get("prompt") or [])
        user = next((m["content"] for m in reversed(prompt) if m.get("role") == "user"), None)
        truth = row.get("reward_model", {}).get("ground_truth", "[]")
        calls = json.loads(truth) if isinstance(truth, str) else truth
        if isinstance(calls, dict):  # {"calls", "facts", "answer"}; older exports: the list of calls
            calls = calls.get("calls") or []
        envs = value("envs") or list(value("initial_states") or {})
        name = str(extra.get("trajectory_id") or "row")
        if extra.get("turn") is not None:
            name += f"#{extra['turn']}"
        try:
            return cls(
                id=name,
                envs=envs,
                initial_states=value("initial_states") or {},
                turns=[TaskTurn(user=user or "", calls=[TruthCall.model_validate(c) for c in calls])],
                final_states=value("final_states") or {},
                volatile=value("volatile") or {},
                augmentation=value("augmentation") or {},
                system=next((m["content"] for m in prompt if m.get("role") == "system"), SYSTEM_PROMPT),
                source=f"rl row {name}",
            )
        except ValidationError as exc:
            raise BadRequest(
                f"not a row of envreg's RL export: {_problems(exc)}",
                "export rows with `envreg synth run --format rl` (or `envreg synth export`)",
            ) from None

    def prompt(self) -> list[dict[str, Any]]:
        """The conversation the policy starts from: the system prompt and the first user turn."""
        return [{"role": "system", "content": self.system}, {"role": "user", "content": self.turns[0].user}]


def _problems(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'task'}: {e['msg']}" for e in exc.errors()[:5])


def scenario_tasks(envs: Iterable[str]) -> list[Task]:
    """Every validation scenario of the named environments (folders or names under ./images)."""
    tasks = []
    for ref in envs:
        environment = load_environment(ref)
        if environment.folder is None:
            raise ValueError(f"{ref}: an environment defined in code has no scenario files")
        scenarios, _ = load_scenarios(environment.folder)
        tasks += [Task.from_scenario(environment, s) for s in scenarios]
    return tasks


def read_tasks(path: Path | str, domains: dict[str, str] | None = None) -> list[Task]:
    """Tasks from a JSON Lines file of tasks or of trajectory records (``envreg synth`` writes those).

    Raises `BadRequest` naming the line that is neither.
    """
    path = Path(path)
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise BadRequest(f"cannot read tasks from {path}: {exc.strerror}", "give a .jsonl file") from None
    tasks = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
            if isinstance(data, dict) and "turns" in data and "query_source" in data:
                tasks.append(Task.from_trajectory(Trajectory.model_validate(data), domains))
            else:
                tasks.append(Task.model_validate(data))
        except (ValueError, ValidationError) as exc:
            reason = _problems(exc) if isinstance(exc, ValidationError) else str(exc)
            raise BadRequest(
                f"{path}:{number}: neither a task nor a trajectory record: {reason}",
                "give trajectories.jsonl from `envreg synth run`, or tasks written by `Task.model_dump_json()`",
            ) from None
    if not tasks:
        raise BadRequest(f"{path} holds no tasks", "give a file with one task or trajectory record per line")
    return tasks


def domain_of(env: str) -> str:
    """An environment's catalog domain, from its folder when it is here ("" when it is not)."""
    try:
        return load_environment(env).domain or ""
    except (OSError, ValueError, LookupError):
        return ""


def unique_ids(tasks: Sequence[Task]) -> None:
    """Refuse two tasks with one id (an eval's results are kept by task id)."""
    seen: set[str] = set()
    for task in tasks:
        if task.id in seen:
            raise BadRequest(f"two tasks have the id {task.id!r}", "give every task its own id")
        seen.add(task.id)
