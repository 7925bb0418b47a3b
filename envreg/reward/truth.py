"""What a prediction is scored against: the oracle's calls, initial and final states, per environment."""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, model_validator

from envreg.canonical import canonical_json, sha256_hex
from envreg.env.augment import Augmentation
from envreg.synth.records import Trajectory


class TruthCall(BaseModel):
    """One oracle call; `masked` arguments are ignored by trace matching, `is_error` calls are not required."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    env: str
    tool: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    masked: list[str] = Field(
        default_factory=list, validation_alias=AliasChoices("masked", "masked_arguments")
    )
    is_error: bool = False


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
    _normalized: list[dict[str, Any]] | None = PrivateAttr(default=None)

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
        return cls(
            id=record.id,
            envs=[e.name for e in record.envs],
            calls=[TruthCall.model_validate(c.model_dump()) for c in record.calls],
            initial_states=record.initial_states,
            final_states=record.final_states,
            final_state_sha256=record.final_state_sha256,
            volatile=record.volatile,
            augmentation=augmentation,
        )

    @property
    def required(self) -> list[TruthCall]:
        return [c for c in self.calls if not c.is_error]


VERL_STATE_KEYS = ("envs", "initial_states", "final_states", "final_state_sha256", "volatile")


def read_truth(value: Any, extra_info: dict[str, Any] | None = None) -> GroundTruth:
    """A `GroundTruth` from a `Trajectory`, a record or ground-truth dict, or its JSON text.

    The RL export's layout is read too: `value` the list of oracle calls (JSON text) and the states
    in `extra_info` (``envs``, ``initial_states``, ``final_states``, ``final_state_sha256``,
    ``volatile``, each a JSON text or value). Raises `ValueError` saying what is wrong. JSON text is
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
    if isinstance(calls, dict) and "calls" in calls:
        calls = calls["calls"]
    if not isinstance(calls, list):
        raise ValueError("with states in extra_info, the ground truth must be the list of oracle calls")
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
