"""Per-environment time budgets that `envreg validate` holds an image to: start-up and per-call latency.

Declared in code (`Environment(..., budgets=Budgets(...))`) and published in the manifest
(`runtime.budgets`) only when declared; `envreg validate` uses `DEFAULT_BUDGETS` otherwise.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class Budgets(BaseModel):
    """How fast an environment image must start and answer."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    startup_ms: int = Field(
        default=30_000,
        gt=0,
        description="From starting a container of the image to its first answered tool call, in ms.",
    )
    call_ms: int = Field(
        default=1_000,
        gt=0,
        description="95th percentile of the tool calls of the scenarios (host to container), in ms.",
    )


DEFAULT_BUDGETS = Budgets()
