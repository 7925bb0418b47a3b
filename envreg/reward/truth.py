"""What a prediction is scored against: the oracle's calls, initial and final states, per environment.

A `GroundTruth` is one unit of scoring (a turn, or a whole record scored at once); a record's
`turns` give one unit per turn (`GroundTruth.units`). Besides calls and states it may carry what
the answer must state (`facts`), the oracle's own answer, and the tools the task forbids.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, model_validator

from envreg.canonical import canonical_json, sha256_hex
from envreg.env.augment import Augmentation
from envreg.env.scenario import states_equal
from envreg.reward.answer import Fact
from envreg.synth.records import Trajectory


class TruthCall(BaseModel):
    """One oracle call; `masked` arguments are ignored by trace matching, `is_error` calls are not
    required (unless every call of the unit failed).

    `result` is what the call answered when the record was made (read-only turns check that the
    prediction obtained it); a truth without it has it computed by replaying the oracle's calls.
    """

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    env: str
    tool: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    masked: list[str] = Field(
        default_factory=list, validation_alias=AliasChoices("masked", "masked_arguments")
    )
    is_error: bool = False
    result: Any = None

    @property
    def has_result(self) -> bool:
        return "result" in self.model_fields_set


class TruthTurn(BaseModel):
    """One turn of a record: its oracle calls, each environment's state after it, its answer."""

    model_config = ConfigDict(extra="ignore")

    calls: list[TruthCall]
    final_states: dict[str, dict[str, Any]]
    facts: list[Fact] | None = None
    answer: str = ""


class GroundTruth(BaseModel):
    """The reward's view of a `Trajectory` (or of the same fields given directly)."""

    model_config = ConfigDict(extra="ignore")

    id: str = ""
    envs: list[str] = Field(description="Environment names, in the record's order.")
    calls: list[TruthCall]
    initial_states: dict[str, dict[str, Any]]
    final_states: dict[str, dict[str, Any]]
    final_state_sha256: dict[str, str] = Field(default_factory=dict)
    volatile: dict[str, list[str]] = Field(default_factory=dict)
    augmentation: dict[str, Augmentation] = Field(
        default_factory=dict, description="Per environment, the augmentation the rollout ran under."
    )
    facts: list[Fact] | None = Field(
        default=None,
        description="What the answer of a read-only unit must state, each fact a list of alternatives; "
        "None: derived from the oracle's results (envreg.reward.answer), []: nothing.",
    )
    answer: str = Field(default="", description="The oracle's answer (scored with oracle=True).")
    forbidden: list[str] = Field(
        default_factory=list, description="Tools the task forbids, as env.tool or tool: calling one scores 0."
    )
    turns: list[TruthTurn] = Field(
        default_factory=list, description="The record's turns, for scoring a model's turns one by one."
    )
    _normalized: list[dict[str, Any]] | None = PrivateAttr(default=None)
    _results: list[Any] | None = PrivateAttr(default=None)
    _units: list[GroundTruth] | None = PrivateAttr(default=None)
    _read_only: bool | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _complete(self) -> GroundTruth:
        missing = [e for e in self.envs if e not in self.initial_states or e not in self.final_states]
        if missing:
            raise ValueError(f"initial and final states are needed for every environment; missing: {missing}")
        unknown = sorted({c.env for c in self.calls} - set(self.envs))
        if unknown:
            raise ValueError(f"oracle calls name environments the record does not have: {unknown}")
        for env in self.envs:
            if env not in self.final_state_sha256 and not self.volatile.get(env):
                self.final_state_sha256[env] = sha256_hex(canonical_json(self.final_states[env]))
        return self

    @classmethod
    def from_trajectory(cls, record: Trajectory) -> GroundTruth:
        augmentation = record.meta.get("augmentation") or {}
        turns = [
            TruthTurn(
                calls=[TruthCall.model_validate(c.model_dump()) for c in turn.calls],
                final_states=turn.states,
                facts=turn.facts,
                answer=turn.answer,
            )
            for turn in record.turns
        ]
        last = record.turns[-1] if record.turns else None
        return cls(
            id=record.id,
            envs=[e.name for e in record.envs],
            calls=[call for turn in turns for call in turn.calls],
            initial_states=record.initial_states,
            final_states=record.final_states,
            final_state_sha256=record.final_state_sha256,
            volatile=record.volatile,
            augmentation=augmentation,
            facts=last.facts if last is not None else None,
            answer=last.answer if last is not None else "",
            forbidden=list(record.meta.get("forbidden_tools") or []),
            turns=turns if all(t.final_states for t in turns) else [],
        )

    @property
    def required(self) -> list[TruthCall]:
        """The calls a prediction must make: the oracle's successful ones; where every call failed (a
        request the environment refuses), its distinct attempts, since trying is how the user learns why."""
        succeeded = [c for c in self.calls if not c.is_error]
        if succeeded:
            return succeeded
        distinct: dict[str, TruthCall] = {}
        for call in self.calls:  # the last attempt of each: what the environment finally answered
            distinct[canonical_json([call.env, call.tool, call.arguments])] = call
        return list(distinct.values())

    @property
    def read_only(self) -> bool:
        """Whether the oracle left every environment's state as it found it (volatile paths aside)."""
        if self._read_only is None:
            self._read_only = all(
                states_equal(self.initial_states[e], self.final_states[e], self.volatile.get(e, []))
                for e in self.envs
            )
        return self._read_only

    def units(self) -> list[GroundTruth]:
        """One unit per turn: the turn's calls, from the state before it to the state after it.

        Raises `ValueError` when the record does not keep each turn's states (records made before
        `Turn.states` existed), which scoring turn by turn needs.
        """
        if self._units is None:
            if not self.turns:
                raise ValueError(
                    f"{self.id or 'the record'} keeps no per-turn states: score it as one unit "
                    "(Scorer.score), or export it again with a current envreg"
                )
            units, before = [], self.initial_states
            for k, turn in enumerate(self.turns):
                unit = GroundTruth(
                    id=f"{self.id}#{k}",
                    envs=self.envs,
                    calls=turn.calls,
                    initial_states=before,
                    final_states={e: turn.final_states.get(e, before[e]) for e in self.envs},
                    volatile=self.volatile,
                    augmentation=self.augmentation,
                    facts=turn.facts,
                    answer=turn.answer,
                    forbidden=self.forbidden,
                )
                units.append(unit)
                before = unit.final_states
            self._units = units
        return self._units


VERL_STATE_KEYS = ("envs", "initial_states", "final_states", "final_state_sha256", "volatile", "augmentation")


def read_truth(value: Any, extra_info: dict[str, Any] | None = None) -> GroundTruth:
    """A `GroundTruth` from a `Trajectory`, a record or ground-truth dict, or its JSON text.

    The RL export's layout is read too: `value` the oracle's calls (JSON text) and the states in
    `extra_info` (``envs``, ``initial_states``, ``final_states``, ``final_state_sha256``,
    ``volatile``, ``augmentation``, each a JSON text or value). Raises `ValueError` saying what is wrong. JSON text is
    parsed once and cached, so that a trainer sending the same ground truth for a group of rollouts
    pays for it once.
    """
    if extra_info and "initial_states" in extra_info:
        parts = tuple(_text(extra_info.get(k)) for k in VERL_STATE_KEYS)
        name = str(extra_info.get("trajectory_id", ""))
        if name and extra_info.get("turn") is not None:
            name += f"#{extra_info['turn']}"
        return _read_split(_text(value), parts, name)
    if isinstance(value, GroundTruth):
        return value
    if isinstance(value, Trajectory):
        return GroundTruth.from_trajectory(value)
    if isinstance(value, bytes):
        value = value.decode()
    if isinstance(value, str):
        return _read_text(value)
    if isinstance(value, dict):
        return _read_dict(value)
    raise ValueError(f"a ground truth must be a record (JSON object or text), not {type(value).__name__}")


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode()
    return value if isinstance(value, str) else json.dumps(value)


@lru_cache(maxsize=4096)
def _read_split(calls_text: str, parts: tuple[str, ...], name: str = "") -> GroundTruth:
    """Calls in the ground truth, states beside them in extra_info (the RL export's rows)."""
    try:
        calls = json.loads(calls_text)
        fields = {k: json.loads(p) for k, p in zip(VERL_STATE_KEYS, parts, strict=True) if p != "null"}
    except ValueError as exc:
        raise ValueError(f"ground truth or extra_info is not valid JSON: {exc}") from None
    if isinstance(calls, dict) and "calls" in calls:  # {"calls", "facts", "answer", "forbidden"}
        fields.update({k: calls[k] for k in ("facts", "answer", "forbidden") if k in calls})
        calls = calls["calls"]
    if not isinstance(calls, list):
        raise ValueError(
            "with states in extra_info, the ground truth must be the oracle's calls (a list, or "
            '{"calls": [...], "facts": [...]})'
        )
    if "envs" not in fields:
        fields["envs"] = list(fields.get("initial_states", {}))
    return _read_dict({**fields, "calls": calls, "id": name})


@lru_cache(maxsize=4096)
def _read_text(text: str) -> GroundTruth:
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"ground truth is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ValueError(
            "ground truth must be a JSON object (a trajectory record or its ground-truth fields)"
        )
    return _read_dict(value)


def _read_dict(value: dict[str, Any]) -> GroundTruth:
    try:
        if "turns" in value:
            return GroundTruth.from_trajectory(Trajectory.model_validate(value))
        if "envs" in value and value["envs"] and isinstance(value["envs"][0], dict):
            value = {**value, "envs": [e["name"] for e in value["envs"]]}
        return GroundTruth.model_validate(value)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'record'}: {e['msg']}" for e in exc.errors()[:5]
        )
        raise ValueError(f"not a trajectory record or ground truth: {problems}") from None
