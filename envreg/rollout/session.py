"""`Session`: one rollout's sandboxes (one per environment of its task), its tools and its calls.

The episode loop and every trainer adapter act on environments through a session: it starts each
sandbox in the task's initial state (or a snapshot), renders the tools as OpenAI function schemas
(from the sandbox's own listing, so an augmentation's distractors are there), runs each call the
model makes, and keeps a `CallRecord` of it. `Session.group` forks a GRPO group: one snapshot of the
initial state per environment, `Runtime.fork(snapshot, n)`, one session per rollout.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

import anyio

from envreg.errors import UnknownToolError
from envreg.rollout.record import CallRecord
from envreg.rollout.task import Task
from envreg.runtime import Runtime, Sandbox, Snapshot

_tools: dict[tuple[str, str], list[dict[str, Any]]] = {}  # (environment digest, augmentation) -> MCP tools


def openai_tool(name: str, tool: dict[str, Any]) -> dict[str, Any]:
    """An MCP tool (wire form) as an OpenAI function tool named `name`."""
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": tool.get("description") or "",
            "parameters": tool.get("inputSchema") or {"type": "object", "properties": {}},
        },
    }


class Session:
    """Sandboxes, tools and calls of one rollout; close it (or use ``async with``) to release the sandboxes."""

    def __init__(self, task: Task, sandboxes: dict[str, Sandbox], listings: dict[str, list[dict[str, Any]]]):
        self.task = task
        self.sandboxes = sandboxes
        self.names: dict[str, tuple[str, str]] = {}
        self.tools: list[dict[str, Any]] = []
        self.mcp_tools: dict[str, dict[str, Any]] = {}
        for env in task.envs:
            for tool in listings[env]:
                name = task.function_name(env, tool["name"])
                self.names[name] = (env, tool["name"])
                self.mcp_tools[name] = tool
                self.tools.append(openai_tool(name, tool))
        self.calls: list[CallRecord] = []
        self.snapshot_ids: dict[str, str] = {}

    # opening -----------------------------------------------------------------------------------
    @classmethod
    async def open(
        cls,
        runtime: Runtime,
        task: Task,
        *,
        isolation: str = "local",
        sources: Mapping[str, Any] | None = None,
        ttl: float | None = None,
    ) -> Session:
        """Sandboxes of every environment of `task` in its initial state (or its snapshots)."""
        sandboxes: dict[str, Sandbox] = {}
        try:
            for env in task.envs:
                state: Any = task.initial_states[env]
                if env in task.snapshot_ids:
                    state = runtime.snapshots.get(task.snapshot_ids[env])
                sandboxes[env] = await runtime.sandbox(
                    (sources or {}).get(env, env),
                    isolation=isolation,  # type: ignore[arg-type]
                    state=state,
                    ttl=ttl,
                    augment=task.augmentation.get(env),
                )
            session = cls(task, sandboxes, await _listings(task, sandboxes))
        except BaseException:
            with anyio.CancelScope(shield=True):
                for sandbox in sandboxes.values():
                    await sandbox.close("its session failed to open")
            raise
        session.snapshot_ids = dict(task.snapshot_ids)
        return session

    @classmethod
    async def group(
        cls,
        runtime: Runtime,
        task: Task,
        n: int,
        *,
        isolation: str = "local",
        sources: Mapping[str, Any] | None = None,
        ttl: float | None = None,
    ) -> list[Session]:
        """A GRPO group: `n` sessions forked from one snapshot of each environment's initial state."""
        forks: dict[str, list[Sandbox]] = {}
        try:
            snaps = {env: await initial_snapshot(runtime, task, env, isolation, sources) for env in task.envs}
            for env, snap in snaps.items():
                forks[env] = await runtime.fork(
                    snap,
                    n,
                    isolation=isolation,  # type: ignore[arg-type]
                    env=(sources or {}).get(env),
                    ttl=ttl,  # type: ignore[arg-type]
                )
                if env in task.augmentation:
                    for sandbox in forks[env]:
                        await sandbox.augment(task.augmentation[env])
            first = {env: sandboxes[0] for env, sandboxes in forks.items()}
            listings = await _listings(task, first)
        except BaseException:
            with anyio.CancelScope(shield=True):
                for sandboxes in forks.values():
                    for sandbox in sandboxes:
                        await sandbox.close("its group failed to open")
            raise
        sessions = []
        for i in range(n):
            session = cls(task, {env: forks[env][i] for env in task.envs}, listings)
            session.snapshot_ids = {env: snap.id for env, snap in snaps.items()}
            sessions.append(session)
        return sessions

    # calls -------------------------------------------------------------------------------------
    async def call(self, name: str, arguments: str | dict[str, Any] | None, call_id: str = "") -> CallRecord:
        """Run one call the model made; a malformed or unknown call is answered, never raised."""
        start = time.perf_counter()
        parsed: Any = arguments
        if isinstance(arguments, str):
            try:
                parsed = json.loads(arguments) if arguments.strip() else {}
            except ValueError as exc:
                return self._keep(call_id, name, arguments, "malformed", _malformed(name, str(exc)), start)
        if parsed is None:
            parsed = {}
        if not isinstance(parsed, dict):
            return self._keep(call_id, name, arguments, "malformed", _malformed(name, "not an object"), start)
        if name not in self.names:
            return self._keep(call_id, name, parsed, "unknown_tool", self._unknown(name), start)
        env, tool = self.names[name]
        try:
            result = await self.sandboxes[env].call_tool(tool, parsed)
        except UnknownToolError:
            return self._keep(call_id, name, parsed, "unknown_tool", self._unknown(name), start, env, tool)
        status = "error" if result.is_error else "ok"
        return self._keep(call_id, name, parsed, status, result.text, start, env, tool)

    def _keep(
        self,
        call_id: str,
        name: str,
        arguments: Any,
        status: str,
        result: str,
        start: float,
        env: str | None = None,
        tool: str | None = None,
    ) -> CallRecord:
        record = CallRecord(
            id=call_id,
            name=name,
            env=env,
            tool=tool,
            arguments=arguments,
            status=status,  # type: ignore[arg-type]
            result=result,
            seconds=time.perf_counter() - start,
        )
        self.calls.append(record)
        return record

    def _unknown(self, name: str) -> str:
        known = ", ".join(list(self.names)[:30])
        return f"Unknown tool {name[:80]!r}: call one of the tools you were given ({known})."

    # state -------------------------------------------------------------------------------------
    async def state_sha256(self) -> dict[str, str]:
        """Each environment's state hash now."""
        return {env: await sb.state_sha256() for env, sb in self.sandboxes.items()}

    async def close(self, reason: str = "closed") -> None:
        """Release every sandbox (shielded: a cancelled caller still releases them)."""
        with anyio.CancelScope(shield=True):
            for sandbox in self.sandboxes.values():
                await sandbox.close(reason)

    async def __aenter__(self) -> Session:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def _malformed(name: str, reason: str) -> str:
    return (
        f"Invalid tool call: the arguments of {name[:80]!r} are not a JSON object ({reason}). "
        "Call it again with valid JSON arguments."
    )


async def _listings(task: Task, sandboxes: Mapping[str, Sandbox]) -> dict[str, list[dict[str, Any]]]:
    """Each environment's tools as its sandbox lists them, fetched once per environment and augmentation."""
    listings = {}
    for env, sandbox in sandboxes.items():
        augmentation = task.augmentation.get(env)
        key = (sandbox.env_digest, augmentation.model_dump_json() if augmentation else "")
        if key not in _tools:
            _tools[key] = await sandbox.list_tools()
        listings[env] = _tools[key]
    return listings


async def initial_snapshot(
    runtime: Runtime, task: Task, env: str, isolation: str, sources: Mapping[str, Any] | None = None
) -> Snapshot:
    """A snapshot of `env`'s initial state in `task` (the stored one when the task names it)."""
    if env in task.snapshot_ids:
        return runtime.snapshots.get(task.snapshot_ids[env])
    spec = await runtime.resolve((sources or {}).get(env, env), isolation)  # type: ignore[arg-type]
    key = (env, spec.digest, id(runtime.snapshots))
    if key not in task._snapshots:  # one canonical serialization per task, not one per group
        task._snapshots[key] = runtime.snapshots.put(spec.name, spec.digest, task.initial_states[env])
    return task._snapshots[key]


class Sessions:
    """Sessions by key (a trajectory, a rollout) for trainers' tools: opened on first use, scored, closed.

    Every method runs on the runtime's event loop (`envreg.rollout.background.Background.run`). Calls
    to one session run one at a time, in the order they came.
    """

    def __init__(self, runtime: Runtime, *, isolation: str = "local", sources: Mapping[str, Any] | None = None,
                 ttl: float | None = 3600.0, score_options: Any = None) -> None:  # fmt: skip
        from envreg.reward.score import Scorer

        self.runtime = runtime
        self.isolation = isolation
        self.sources = dict(sources or {})
        self.ttl = ttl
        self.open: dict[str, Session] = {}
        self._locks: dict[str, anyio.Lock] = {}
        self.scorer = Scorer(runtime, options=score_options, sources=self.sources)

    def _lock(self, key: str) -> anyio.Lock:
        return self._locks.setdefault(key, anyio.Lock())

    async def get(self, key: str, task: Task) -> Session:
        async with self._lock(key):
            if key not in self.open:
                self.open[key] = await Session.open(
                    self.runtime, task, isolation=self.isolation, sources=self.sources, ttl=self.ttl
                )
            return self.open[key]

    async def call(
        self, key: str, task: Task, env: str, tool: str, arguments: Any, call_id: str = ""
    ) -> CallRecord:
        """Run one call in `key`'s session (opened in `task`'s initial state on first use)."""
        session = await self.get(key, task)
        async with self._lock(key):
            return await session.call(task.function_name(env, tool), arguments, call_id)

    async def score(self, key: str, task: Task) -> Any:
        """The composite reward of the calls `key`'s session ran (none: an episode that called nothing).

        The pool sees the calls, never the model's words (the trainer's loop holds them), so read-only
        turns are not asked to state their facts here (``check_answer`` off); every other check holds.
        """
        from envreg.rollout.loop import ran

        session = self.open.get(key)
        options = self.scorer.options.model_copy(update={"check_answer": False})
        return await self.scorer.score(task.truth(), ran(session.calls if session else []), options)

    async def close(self, key: str) -> None:
        session = self.open.pop(key, None)
        self._locks.pop(key, None)
        if session is not None:
            await session.close()

    async def close_all(self) -> None:
        for key in list(self.open):
            await self.close(key)
        await self.scorer.close()


@lru_cache(maxsize=1024)
def task_from_json(text: str) -> Task:
    """A task from its JSON text, parsed once (a GRPO group sends the same text n times)."""
    return Task.model_validate_json(text)
