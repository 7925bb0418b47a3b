"""`EpisodeRecord`: what one rollout did, how it scored, and everything that pins it (provenance)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from envreg.reward.score import RewardBreakdown

Stop = Literal["answered", "step_limit", "token_budget", "latency_budget", "error", "cancelled"]


class CallRecord(BaseModel):
    """One tool call as the model made it and what the sandbox answered."""

    id: str = ""
    name: str = Field(description="The function name the model called.")
    env: str | None = Field(default=None, description="None when the name is no tool of the task.")
    tool: str | None = None
    arguments: dict[str, Any] | str = Field(
        description="The parsed arguments, or the raw text when unreadable."
    )
    status: Literal["ok", "error", "malformed", "unknown_tool"]
    result: str = Field(description="What the model was sent back.")
    seconds: float = 0.0


class TurnRecord(BaseModel):
    """One user turn: the messages after the user's, the calls, each state hash after it, its reward."""

    user: str
    messages: list[dict[str, Any]] = Field(default_factory=list)
    calls: list[CallRecord] = Field(default_factory=list)
    state_sha256: dict[str, str] = Field(default_factory=dict)
    stop: Stop = "answered"
    steps: int = Field(default=0, description="Assistant messages in the turn.")
    policy_seconds: float = 0.0
    envreg_seconds: float = Field(default=0.0, description="The turn's time outside the policy.")
    reward: RewardBreakdown | None = Field(
        default=None, description="The turn scored alone, from the oracle's state before it."
    )


class EnvProvenance(BaseModel):
    name: str
    isolation: str
    sandbox: str = Field(default="", description="The sandbox id the rollout ran in.")
    digest: str = Field(description="What ran: the image ID (Docker tiers) or the manifest digest (local).")
    snapshot_id: str | None = None
    initial_state_sha256: str = ""
    final_state_sha256: str = ""


class EpisodeRecord(BaseModel):
    """One episode of a task under a policy: turns, reward, provenance and timings."""

    id: str
    task_id: str
    task_source: str = ""
    trial: int = 0
    group: str | None = Field(default=None, description="The GRPO group (fork) this rollout belongs to.")
    envs: list[EnvProvenance] = Field(default_factory=list)
    model: str = ""
    base_url: str | None = None
    sampling: dict[str, Any] = Field(default_factory=dict)
    turns: list[TurnRecord] = Field(default_factory=list)
    reward: RewardBreakdown | None = None
    passed: bool = Field(
        default=False, description="Every final state equals the oracle's and every oracle call was made."
    )
    stop: Stop = "answered"
    error: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    timings: dict[str, float] = Field(default_factory=dict)

    @property
    def calls(self) -> list[CallRecord]:
        return [c for t in self.turns for c in t.calls]
