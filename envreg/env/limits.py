"""Per-environment size limits: how large a state may grow and how large one call's arguments may be.

Declared in code (`Environment(..., limits=Limits(...))`, defaults otherwise), published in the
manifest (`runtime.limits`) and enforced by every instance, whatever tier or server hosts it: a call
over a limit is an error result naming the limit, and the state stays as it was.

Sizes are bytes of compact JSON (UTF-8). For a state that is pydantic's serialization, which is
never smaller than the canonical form (the same text up to key order, except that an integral
float keeps its ``.0``), so a state within the limit is within it canonically too.
"""

from __future__ import annotations

from typing import Any

import pydantic_core
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from envreg.env.cow import json_size

DEFAULT_MAX_STATE_BYTES = 8 * 1024 * 1024
DEFAULT_MAX_ARGUMENT_BYTES = 256 * 1024


class Limits(BaseModel):
    """How large one instance's state, and one call's arguments, may be."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_state_bytes: int = Field(
        default=DEFAULT_MAX_STATE_BYTES, gt=0, description="Largest state, in bytes of compact JSON."
    )
    max_argument_bytes: int = Field(
        default=DEFAULT_MAX_ARGUMENT_BYTES,
        gt=0,
        description="Largest arguments of one tool call, in bytes of compact JSON.",
    )

    def argument_problem(self, arguments: Any) -> str | None:
        """Why these arguments are refused, or None when they are within the limit."""
        if not arguments:
            return None
        size = len(pydantic_core.to_json(arguments, serialize_unknown=True))
        if size <= self.max_argument_bytes:
            return None
        return (
            f"Refused: the arguments are {size:,} bytes, over this environment's limit of "
            f"{self.max_argument_bytes:,} bytes per call (max_argument_bytes); nothing was changed. "
            "Send shorter values."
        )

    def state_problem(self, size: int, subject: str = "the state is") -> str | None:
        """Why a state of `size` bytes is refused, or None when it is within the limit."""
        if size <= self.max_state_bytes:
            return None
        return (
            f"{subject} {size:,} bytes, over this environment's limit of "
            f"{self.max_state_bytes:,} bytes (max_state_bytes)"
        )

    def check_state(self, state: BaseModel) -> None:
        """Raise a `pydantic.ValidationError` (type ``state_too_large``) for a state over the limit.

        A validation error, so that every caller that refuses invalid states (the control plane's
        422, the runtime's `InvalidState`) refuses an oversized one the same way."""
        problem = self.state_problem(json_size(state))
        if problem is not None:
            raise ValidationError.from_exception_data(
                type(state).__name__,
                [
                    {
                        "type": pydantic_core.PydanticCustomError("state_too_large", problem),  # pyright: ignore[reportArgumentType]
                        "loc": (),
                        "input": f"<{type(state).__name__}>",
                    }
                ],
            )
