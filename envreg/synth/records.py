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
            "state_sha256": {"calendar": "..."}, "states": {"calendar": {...}}, "answer": "...", "messages": []}],
 "final_states": {"calendar": {...}}, "final_state_sha256": {"calendar": "..."},
 "snapshot_ids": {"calendar": "sha256:..."}}
```

Fields added later, all optional so older records still load: `Turn.states` (each environment's
full state after the turn, so that a turn can be replayed or scored on its own), `Turn.answer`
(the assistant's closing message), `Turn.messages` (the turn's conversation after the query
when an LLM solved it: assistant text, tool calls, simulated-user replies, in OpenAI chat form)
`Turn.facts` (what the answer of a read-only turn must state, `envreg.reward.answer`; None:
derived from the results when the turn is scored) and `ExecutedCall.observation` (what the agent saw
when an augmentation reshaped the result; exports show it, the reward compares `result`).

Tool names in exports: a trajectory over one environment uses the plain tool names; over several,
``<env>__<tool>`` (`function_name` / `split_function_name`), as multi-server MCP hosts do.
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
    """A call together with what the sandbox answered (`observation`: the text the agent saw, when an
    augmentation reshaped it: another format, noise fields, an injected error)."""

    result: Any = None
    is_error: bool = False
    observation: str | None = None


class Turn(BaseModel):
    """One user turn: the query, the calls that answer it, and each environment's state hash after them."""

    model_config = ConfigDict(extra="forbid")

    query: str
    calls: list[ExecutedCall]
    state_sha256: dict[str, str] = Field(default_factory=dict)
    states: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="Each environment's state after the turn."
    )
    answer: str = Field(default="", description="The assistant's closing message of the turn.")
    messages: list[dict[str, Any]] = Field(
        default_factory=list, description="The turn's conversation after the query, when an LLM solved it."
    )
    facts: list[list[str | int | float]] | None = Field(
        default=None,
        description="What the answer must state (read-only turns), each a list of alternatives; None: derived.",
    )


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

    def provenance(self) -> dict[str, Any]:
        """What pins this record: environments (image and manifest digests), seed, snapshots, state hashes."""
        return {
            "trajectory_id": self.id,
            "record_version": self.record_version,
            "seed": self.seed,
            "query_source": self.query_source,
            "envs": [env.model_dump() for env in self.envs],
            "snapshot_ids": self.snapshot_ids,
            "initial_state_sha256": self.initial_state_sha256,
            "final_state_sha256": self.final_state_sha256,
        }


MULTI_ENV_SEPARATOR = "__"


def function_name(env: str, tool: str, envs: list[str]) -> str:
    """The function name a model sees: ``tool`` with one environment, ``env__tool`` with several."""
    return tool if len(envs) <= 1 else f"{env}{MULTI_ENV_SEPARATOR}{tool}"


def split_function_name(name: str, envs: list[str]) -> tuple[str, str]:
    """The inverse of `function_name`: (env, tool); raises ValueError for a name of no environment."""
    if len(envs) == 1:
        return envs[0], name
    env, sep, tool = name.partition(MULTI_ENV_SEPARATOR)
    if not sep or env not in envs:
        raise ValueError(
            f"{name!r} names no tool of {', '.join(envs)} (expected <env>{MULTI_ENV_SEPARATOR}<tool>)"
        )
    return env, tool
