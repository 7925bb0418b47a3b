"""Trajectory records: the one format synthesis writes and reward evaluation reads.

A `Trajectory` is an EnvFactory-style multi-turn record with provenance: every call, result and
state hash in it was produced by executing the calls in a sandbox, never imagined. Exports
(SFT, RL) are views of it; the reward replays `calls` against `initial_states` and compares with
`final_states`.

```json
{"id": "traj_...", "seed": 7, "query_source": "template",
 "envs": [{"name": "calendar", "version": "1.0.0", "manifest_digest": "sha256:...", "image_digest": null}],
 "initial_states": {"calendar": {...}}, "initial_state_sha256": {"calendar": "..."},
 "turns": [{"query": "...", "calls": [{"env": "calendar", "tool": "list_events",
            "arguments": {"day": "2026-01-06"}, "masked": [], "result": [...], "is_error": false}],
            "state_sha256": {"calendar": "..."}}],
 "final_states": {"calendar": {...}}, "final_state_sha256": {"calendar": "..."},
 "snapshot_ids": {"calendar": "sha256:..."}}
```
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

RECORD_VERSION = 1


class EnvRef(BaseModel):
    """Which environment, exactly: name, version and the digests that pin its code and image."""

    model_config = ConfigDict(extra="forbid")

    name: str
    version: str
    manifest_digest: str
    image_digest: str | None = Field(default=None, description="None when executed on the local tier.")


class Call(BaseModel):
    """One tool call. `masked` names the arguments whose values the trace reward ignores (free text)."""

    model_config = ConfigDict(extra="forbid")

    env: str
    tool: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    masked: list[str] = Field(default_factory=list)


class ExecutedCall(Call):
    """A call together with what the sandbox answered."""

    result: Any = None
    is_error: bool = False


class Turn(BaseModel):
    """One user turn: the query, the calls that answer it, and each environment's state hash after them."""

    model_config = ConfigDict(extra="forbid")

    query: str
    calls: list[ExecutedCall]
    state_sha256: dict[str, str] = Field(default_factory=dict)


class Trajectory(BaseModel):
    """A verified multi-turn trajectory over one or more environments."""

    model_config = ConfigDict(extra="forbid")

    record_version: int = RECORD_VERSION
    id: str
    seed: int
    query_source: Literal["template", "llm"]
    envs: list[EnvRef]
    initial_states: dict[str, dict[str, Any]]
    initial_state_sha256: dict[str, str]
    turns: list[Turn]
    final_states: dict[str, dict[str, Any]]
    final_state_sha256: dict[str, str]
    snapshot_ids: dict[str, str] = Field(default_factory=dict)
    volatile: dict[str, list[str]] = Field(
        default_factory=dict, description="Per environment, state paths that state equivalence ignores."
    )
    meta: dict[str, Any] = Field(default_factory=dict, description="Anything else: chain, sampler options.")

    @property
    def calls(self) -> list[ExecutedCall]:
        """Every call of every turn, in order."""
        return [call for turn in self.turns for call in turn.calls]
