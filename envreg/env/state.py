"""`EnvState`: the pydantic base every environment state model derives from."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field, NaiveDatetime

from envreg.canonical import canonical_json, sha256_hex
from envreg.env.cow import Committed

DEFAULT_EPOCH = datetime(2026, 1, 5, 9, 0, 0)


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
        """The state as plain JSON data."""
        return self.model_dump(mode="json")

    def canonical(self) -> str:
        """Canonical JSON text of the state (computed once for a committed state, which never changes)."""
        fields = self.__pydantic_fields_set__
        if type(fields) is Committed:
            memo = getattr(fields, "memo", None)
            if memo is None:
                text = canonical_json(self.to_json())
                memo = fields.memo = (text, sha256_hex(text))
            return memo[0]
        return canonical_json(self.to_json())

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
