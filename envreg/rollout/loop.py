"""The episode loop: task -> sandboxes (or a GRPO group by fork) -> policy -> tool calls over MCP -> reward.

```python
async with Runtime() as rt:
    rollouts = Rollouts(rt, ChatPolicy("http://127.0.0.1:8000/v1", "Qwen/Qwen3-8B"))
    record = await rollouts.episode(task)                      # one episode, scored
    group = await rollouts.group(task, 8)                      # 8 rollouts forked from one snapshot
    records = await rollouts.run([(t, 0) for t in tasks], concurrency=64)
```

Each user turn: the policy answers the conversation so far with the tools; every tool call of its
message (parallel calls included, in their order) runs in the sandbox and its result goes back; the
turn ends when the model answers without calls, after `max_steps` messages, or when the episode's
token or latency budget is spent. After each turn every environment's state hash is recorded. The
episode is scored by `envreg.reward` (state and trace against the oracle) as a whole and turn by
turn. A cancelled episode releases its sandboxes; a failing policy or sandbox ends the episode with
its `error` recorded, never a lost record.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import anyio

from envreg.canonical import canonical_json, sha256_hex
from envreg.errors import EnvregError
from envreg.reward.score import RewardBreakdown, ScoreOptions, Scorer
from envreg.rollout.policy import Policy
from envreg.rollout.record import CallRecord, EnvProvenance, EpisodeRecord, Stop, TurnRecord
from envreg.rollout.session import Session
from envreg.rollout.task import Task
from envreg.runtime import Runtime


@dataclass
class EpisodeOptions:
    """How episodes run and are scored."""

    isolation: str = "local"
    max_steps: int = 50
    """Assistant messages per user turn."""
    max_parallel_calls: int = 16
    """Calls run from one assistant message; the rest are answered as not run."""
    max_tokens: int | None = None
    """Completion tokens over the episode (from the endpoint's usage)."""
    max_seconds: float | None = None
    """Policy time over the episode."""
    sampling: dict[str, Any] = field(default_factory=dict)
    score: bool = True
    per_turn: bool = True
    score_isolation: str = "local"
    score_options: ScoreOptions | None = None
    sources: dict[str, Any] = field(default_factory=dict)
    """Environment name -> folder, `Environment` or image reference (default: the name)."""
    ttl: float | None = None


def passed(reward: RewardBreakdown | None) -> bool:
    """An episode passes when every final state equals the oracle's and every oracle call was made."""
    return reward is not None and reward.r_state >= 1.0 and reward.matched_calls == reward.expected_calls


class Rollouts:
    """Runs episodes of tasks under one policy on one runtime, and scores them."""

    def __init__(self, runtime: Runtime, policy: Policy, options: EpisodeOptions | None = None) -> None:
        self.runtime = runtime
        self.policy = policy
        self.options = options or EpisodeOptions()
        self.scorer = Scorer(
            runtime,
            isolation=self.options.score_isolation,
            options=self.options.score_options,
            sources=self.options.sources,
        )
        self._hashes: dict[int, dict[str, str]] = {}

    # episodes ----------------------------------------------------------------------------------
    async def episode(
        self, task: Task, *, trial: int = 0, sampling: dict[str, Any] | None = None
    ) -> EpisodeRecord:
        """One episode of `task` in sandboxes of its own, scored; its sandboxes are released in any case."""
        start = time.perf_counter()
        session = await Session.open(
            self.runtime,
            task,
            isolation=self.options.isolation,
            sources=self.options.sources,
            ttl=self.options.ttl,
        )
        acquired = time.perf_counter() - start
        try:
            record = await self.play(session, trial=trial, sampling=sampling)
        finally:
            await session.close()
        record.timings["acquire"] = acquired
        if self.options.score:
            await self.score(record, task)
        return record

    async def group(
        self, task: Task, n: int, *, sampling: dict[str, Any] | None = None
    ) -> list[EpisodeRecord]:
        """`n` rollouts of `task` forked from one snapshot of its initial state (a GRPO group), scored."""
        start = time.perf_counter()
        sessions = await Session.group(
            self.runtime,
            task,
            n,
            isolation=self.options.isolation,
            sources=self.options.sources,
            ttl=self.options.ttl,
        )
        acquired = time.perf_counter() - start
        group = "grp_" + secrets.token_hex(6)
        records: list[EpisodeRecord | None] = [None] * n

        async def one(i: int) -> None:
            try:
                records[i] = await self.play(sessions[i], trial=i, group=group, sampling=sampling)
            finally:
                await sessions[i].close()

        try:
            async with anyio.create_task_group() as tg:
                for i in range(n):
                    tg.start_soon(one, i)
        finally:
            for session in sessions:
                await session.close()
        done = [r for r in records if r is not None]
        for record in done:
            record.timings["acquire"] = acquired
            if self.options.score:
                await self.score(record, task)
        return done

    async def run(
        self,
        jobs: Iterable[tuple[Task, int]],
        *,
        concurrency: int = 8,
        on_record: Callable[[EpisodeRecord], None] | None = None,
        sampling: Callable[[Task, int], dict[str, Any]] | None = None,
    ) -> list[EpisodeRecord]:
        """Episodes of (task, trial) pairs, `concurrency` at once; `on_record` sees each as it ends."""
        limiter = anyio.CapacityLimiter(max(1, concurrency))
        records: list[EpisodeRecord] = []

        async def one(task: Task, trial: int) -> None:
            async with limiter:
                record = await self.episode(
                    task, trial=trial, sampling=sampling(task, trial) if sampling else None
                )
            records.append(record)
            if on_record is not None:
                on_record(record)

        async with anyio.create_task_group() as tg:
            for task, trial in jobs:
                tg.start_soon(one, task, trial)
        return records

    # the loop ----------------------------------------------------------------------------------
    async def play(
        self,
        session: Session,
        *,
        trial: int = 0,
        group: str | None = None,
        sampling: dict[str, Any] | None = None,
    ) -> EpisodeRecord:
        """Play the task of an open session to its end (the session stays open; the caller closes it)."""
        task, opts = session.task, self.options
        params = {**opts.sampling, **(sampling or {})}
        record = EpisodeRecord(
            id="ep_" + secrets.token_hex(8),
            task_id=task.id,
            task_source=task.source,
            trial=trial,
            group=group,
            model=getattr(self.policy, "model", ""),
            base_url=getattr(self.policy, "base_url", None),
            sampling=params,
            envs=[
                EnvProvenance(
                    name=env,
                    isolation=sb.isolation,
                    sandbox=sb.id,
                    digest=sb.env_digest,
                    snapshot_id=session.snapshot_ids.get(env),
                    initial_state_sha256=self._initial_hash(task)[env],
                )
                for env, sb in session.sandboxes.items()
            ],
        )
        messages = task.prompt()
        start = time.perf_counter()
        policy_seconds = 0.0
        try:
            for k, turn in enumerate(task.turns):
                if k > 0:
                    messages.append({"role": "user", "content": turn.user})
                turn_start, first, calls_before = time.perf_counter(), len(messages), len(session.calls)
                current = TurnRecord(user=turn.user)
                record.turns.append(current)
                try:
                    while True:
                        stop = self._budget_stop(record, policy_seconds, current)
                        if stop is not None:
                            current.stop = record.stop = stop
                            break
                        reply = await self.policy.complete(messages, session.tools, params)
                        policy_seconds += reply.seconds
                        current.policy_seconds += reply.seconds
                        record.prompt_tokens += reply.prompt_tokens
                        record.completion_tokens += reply.completion_tokens
                        message = _assistant(reply.message)
                        messages.append(message)
                        current.steps += 1
                        calls = message.get("tool_calls") or []
                        if not calls:
                            break
                        for i, call in enumerate(calls):
                            messages.append(await self._run_call(session, call, i))
                finally:
                    current.messages = messages[first:]
                    current.calls = session.calls[calls_before:]
                    with anyio.CancelScope(shield=True):
                        if record.error is None:
                            current.state_sha256 = await session.state_sha256()
                    current.envreg_seconds = time.perf_counter() - turn_start - current.policy_seconds
                if record.stop != "answered":
                    break
        except EnvregError as exc:
            record.stop, record.error = "error", str(exc)
        finally:
            total = time.perf_counter() - start
            record.timings.update(
                total=total,
                policy=policy_seconds,
                tools=sum(c.seconds for c in session.calls),
                envreg=total - policy_seconds,
            )
            last = record.turns[-1].state_sha256 if record.turns else {}
            for env in record.envs:
                env.final_state_sha256 = last.get(env.name, "")
        return record

    async def _run_call(self, session: Session, call: dict[str, Any], index: int) -> dict[str, Any]:
        call_id = str(call.get("id") or "")
        function = call.get("function") or {}
        name = str(function.get("name") or "")
        if index >= self.options.max_parallel_calls:
            content = (
                f"Not run: at most {self.options.max_parallel_calls} tool calls are run from one message."
            )
        else:
            content = (await session.call(name, function.get("arguments"), call_id)).result
        return {"role": "tool", "tool_call_id": call_id, "content": content}

    def _budget_stop(self, record: EpisodeRecord, policy_seconds: float, turn: TurnRecord) -> Stop | None:
        opts = self.options
        if turn.steps >= opts.max_steps:
            return "step_limit"
        if opts.max_tokens is not None and record.completion_tokens >= opts.max_tokens:
            return "token_budget"
        if opts.max_seconds is not None and policy_seconds >= opts.max_seconds:
            return "latency_budget"
        return None

    def _initial_hash(self, task: Task) -> dict[str, str]:
        key = id(task)
        if key not in self._hashes:
            self._hashes[key] = {e: sha256_hex(canonical_json(s)) for e, s in task.initial_states.items()}
        return self._hashes[key]

    # reward ------------------------------------------------------------------------------------
    async def score(self, record: EpisodeRecord, task: Task) -> EpisodeRecord:
        """The composite reward of the calls that ran, for the episode and each turn (from the oracle's state
        before it)."""
        start = time.perf_counter()
        last = answer(record.turns[-1]) if record.turns else ""
        record.reward = await self.scorer.score(task.truth(), ran(record.calls, last))
        if self.options.per_turn and len(task.turns) > 1:
            for k, turn in enumerate(record.turns):
                truth = task.turn_truth(k)
                if truth is not None:
                    turn.reward = await self.scorer.score(truth, ran(turn.calls, answer(turn)))
        elif record.turns:
            record.turns[0].reward = record.reward
        record.passed = passed(record.reward) and record.error is None
        record.timings["score"] = time.perf_counter() - start
        return record

    async def aclose(self) -> None:
        await self.scorer.close()


def ran(calls: Iterable[CallRecord], said: str = "") -> dict[str, Any]:
    """The calls that ran (unreadable ones as their raw text) and what the model `said` last, as the
    reward reads model output (`envreg.reward.parse_output`: ``{"calls", "answer"}``)."""
    out = []
    for call in calls:
        arguments = call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments)
        out.append({"name": call.name, "arguments": arguments})
    return {"calls": out, "answer": said}


def answer(turn: TurnRecord) -> str:
    """The turn's closing words: its last assistant message without tool calls."""
    for message in reversed(turn.messages):
        if message.get("role") == "assistant" and not message.get("tool_calls"):
            return str(message.get("content") or "")
    return ""


def _assistant(message: dict[str, Any]) -> dict[str, Any]:
    """The assistant message to keep in the conversation (role, content, tool calls; nothing else)."""
    kept: dict[str, Any] = {"role": "assistant", "content": message.get("content")}
    if message.get("tool_calls"):
        kept["tool_calls"] = [
            {
                "id": str(c.get("id") or f"call_{i}"),
                "type": "function",
                "function": {
                    "name": str((c.get("function") or {}).get("name") or ""),
                    "arguments": (c.get("function") or {}).get("arguments") or "",
                },
            }
            for i, c in enumerate(message["tool_calls"])
            if isinstance(c, dict)
        ]
    return kept
