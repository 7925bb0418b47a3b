"""`EnvState`: the pydantic base every environment state model derives from."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any, Self

import pydantic_core
from pydantic import BaseModel, ConfigDict, Field, NaiveDatetime

from envreg.canonical import sha256_hex
from envreg.env.cow import Committed
from envreg.env.set_order import set_fixer

DEFAULT_EPOCH = datetime(2026, 1, 5, 9, 0, 0)


def _canonical_float(text: str) -> float | int:
    value = float(text)
    return int(value) if value.is_integer() and abs(value) < 2**53 else value


def _no_constants(name: str) -> None:
    raise ValueError(f"canonical JSON has no form for the number {name}")


def _canonical_text(state: BaseModel) -> str:
    """`canonical_json(state.to_json())`, byte for byte, without walking the data in Python: pydantic
    writes compact JSON, the C parser reads it back (integral floats as integers), the C encoder sorts
    the keys; the items of set fields are sorted (`envreg.env.set_order`)."""
    data = json.loads(
        pydantic_core.to_json(state, inf_nan_mode="constants"),
        parse_float=_canonical_float,
        parse_constant=_no_constants,
    )
    if (fix := set_fixer(type(state))) is not None:
        data = fix(data)
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


class EnvState(BaseModel):
    """All that an environment knows. Tools read and write only this.

    `now` is the environment's clock (never the wall clock) and `new_id` hands out
    deterministic ids, so replaying the same calls on the same state gives the same bytes.
    """

    model_config = ConfigDict(extra="forbid")

    now: NaiveDatetime = Field(
        default=DEFAULT_EPOCH, description="The environment's clock (naive, environment-local)."
    )
    id_counters: dict[str, int] = Field(
        default_factory=dict, description="Next-id counters, one per id prefix."
    )

    def new_id(self, prefix: str) -> str:
        """Return the next id for `prefix`, e.g. ``evt_0003``; deterministic for a given state."""
        n = self.id_counters.get(prefix, 0) + 1
        self.id_counters[prefix] = n
        return f"{prefix}_{n:04d}"

    def advance(self, **delta: float) -> datetime:
        """Move the clock forward by a `timedelta(**delta)` and return the new time."""
        self.now = self.now + timedelta(**delta)
        return self.now

    def to_json(self) -> dict[str, Any]:
        """The state as plain JSON data (set fields as sorted lists)."""
        data = self.model_dump(mode="json")
        fix = set_fixer(type(self))
        return data if fix is None else fix(data)

    def canonical(self, *, cached: bool = True) -> str:
        """Canonical JSON text of the state (computed once for a committed state, which never changes).

        ``cached=False`` serializes it again: what a client reads back shows even a write that went
        past the journal (a C function writing into a state list in place)."""
        fields = self.__pydantic_fields_set__
        if cached and type(fields) is Committed:
            memo = getattr(fields, "memo", None)
            if memo is None:
                text = _canonical_text(self)
                memo = fields.memo = (text, sha256_hex(text))
            return memo[0]
        return _canonical_text(self)

    def sha256(self) -> str:
        """Hex sha256 of the canonical state."""
        fields = self.__pydantic_fields_set__
        if type(fields) is Committed:
            self.canonical()
            return fields.memo[1]  # set by canonical()
        return sha256_hex(self.canonical())

    @classmethod
    def from_json(cls, data: dict[str, Any] | str | bytes) -> Self:
        """Validate JSON data (or text) into a state; raises `pydantic.ValidationError`."""
        if isinstance(data, str | bytes):
            return cls.model_validate_json(data)
        return cls.model_validate(data)
