"""Replay tau2's gold tasks through envreg sandboxes; compare envreg's verdict with tau2's EnvironmentEvaluator.

For each task, the gold actions go to a sandbox of ``tau2-<domain>`` (on the chosen tier) started from
the task's initial state, as the model's (and, for telecom, the user's) tool calls. envreg's verdict
follows the task's reward basis, on the sandbox's final state: ``DB``, its databases have the hashes of
tau2's own gold run (tau2's environment, the gold actions, its `get_db_hash`); ``ENV_ASSERTION``, tau2's
assertions hold on it. tau2's verdict: its `EnvironmentEvaluator.calculate_reward` on the
trajectory made of envreg's calls and results, which replays them in a fresh tau2 environment,
refuses a trajectory whose results differ from its own, and compares the databases with the gold run.
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from envreg.adapters import tau2


@dataclass(frozen=True)
class TaskResult:
    domain: str
    task_id: str
    calls: int
    envreg: bool
    tau2: bool
    reason: str = ""
    call_ms: list[float] = field(default_factory=list)

    @property
    def agree(self) -> bool:
        return self.envreg == self.tau2


@dataclass
class Tau2Report:
    isolation: str
    results: list[TaskResult] = field(default_factory=list)
    seconds: float = 0.0

    def by_domain(self) -> dict[str, Counter[str]]:
        rows: dict[str, Counter[str]] = {}
        for r in self.results:
            row = rows.setdefault(r.domain, Counter())
            row["tasks"] += 1
            row["calls"] += r.calls
            row["envreg match"] += r.envreg
            row["tau2 reward 1"] += r.tau2
            row["agree"] += r.agree
        return rows

    @property
    def disagreements(self) -> list[TaskResult]:
        return [r for r in self.results if not r.agree]


def gold_hashes(domain: str, task: Any) -> tuple[str | None, str | None]:
    """The database hashes of tau2's own gold run of the task."""
    env = tau2.DOMAIN_INFO[domain].get_environment()
    init = task.initial_state
    if init is not None:
        env.set_state(init.initialization_data, init.initialization_actions, init.message_history or [])
    for action in task.evaluation_criteria.actions or []:
        with contextlib.suppress(Exception):  # as tau2's evaluator: a failing gold action is skipped
            env.make_tool_call(action.name, requestor=action.requestor, **action.arguments)
    return env.get_db_hash(), env.get_user_db_hash()


def envreg_verdict(domain: str, task: Any, state: dict[str, Any]) -> tuple[bool, str]:
    """envreg's verdict on a final state, by the task's reward basis (DB: tau2's gold hashes; ENV_ASSERTION:
    tau2's assertions on this state)."""
    from tau2.data_model.tasks import RewardType

    basis = task.evaluation_criteria.reward_basis if task.evaluation_criteria else []
    if RewardType.DB in basis and tau2.db_hashes(domain, state) != gold_hashes(domain, task):
        return False, "the final database differs from tau2's gold run"
    if RewardType.ENV_ASSERTION in basis:
        model = tau2.state_model(domain).model_validate(state)
        user = getattr(model, "user_db", None)
        db = type(tau2.reference(domain).tools.db).model_validate(model.model_dump(exclude={"user_db"}))
        kwargs = {"db": db, **({"user_db": user} if user is not None else {})}
        env = tau2.DOMAIN_INFO[domain].get_environment(**kwargs)
        for assertion in task.evaluation_criteria.env_assertions or []:
            if not env.run_env_assertion(assertion, raise_assertion_error=False):
                return False, f"tau2's assertion {assertion.func_name} fails on the final state"
    return True, ""


def tau2_verdict(domain: str, task: Any, trajectory: list[Any]) -> tuple[bool, str]:
    """tau2's EnvironmentEvaluator on the trajectory envreg produced: (reward == 1, why not)."""
    from tau2.evaluator.evaluator_env import EnvironmentEvaluator

    try:
        info = EnvironmentEvaluator.calculate_reward(
            tau2.DOMAIN_INFO[domain].get_environment, task, trajectory
        )
    except Exception as exc:  # set_state refuses a trajectory whose results differ from tau2's
        return False, f"tau2 refused the trajectory: {str(exc).splitlines()[0][:160]}"
    return info.reward == 1.0, "" if info.reward == 1.0 else f"tau2 reward {info.reward}"


def _trajectory(calls: list[tuple[str, dict[str, Any], str]], results: list[Any]) -> list[Any]:
    from tau2.data_model.message import AssistantMessage, ToolCall, ToolMessage, UserMessage

    messages: list[Any] = []
    for i, ((name, arguments, requestor), result) in enumerate(zip(calls, results, strict=True)):
        call = ToolCall(
            id=f"call_{i}",
            name=name.removeprefix(tau2.USER_PREFIX) if requestor == "user" else name,
            arguments=arguments,
            requestor=requestor,
        )
        kind = UserMessage if requestor == "user" else AssistantMessage
        messages.append(kind(role=requestor, tool_calls=[call]))
        messages.append(
            ToolMessage(
                id=call.id, role="tool", content=result.text, requestor=requestor, error=result.is_error
            )
        )
    return messages


async def replay_task(
    runtime: Any, domain: str, task: Any, isolation: str = "local", calls: list[Any] | None = None
) -> TaskResult:
    """Replay `calls` (default: the task's gold actions) as the model's; both verdicts against the task's gold."""
    calls = tau2.gold_calls(task) if calls is None else calls
    initial = tau2.task_initial_state(domain, task)
    ref = tau2.environment(domain) if isolation == "local" else tau2.env_name(domain)
    sb = await runtime.sandbox(ref, isolation=isolation, state=initial)
    results, call_ms = [], []
    try:
        for name, arguments, _ in calls:
            started = time.perf_counter()
            results.append(await sb.call_tool(name, arguments))
            call_ms.append((time.perf_counter() - started) * 1000)
        state = await sb.state()
    finally:
        await sb.close()
    envreg_ok, reason = envreg_verdict(domain, task, state)
    theirs, why = tau2_verdict(domain, task, _trajectory(calls, results))
    return TaskResult(domain, str(task.id), len(calls), envreg_ok, theirs, reason or why, call_ms)


async def replay_all(
    runtime: Any,
    domains: list[str],
    *,
    isolation: str = "local",
    limit: int | None = None,
    progress: Any = None,
) -> Tau2Report:
    report = Tau2Report(isolation)
    started = time.perf_counter()
    for domain in domains:
        for task in tau2.tasks(domain)[:limit]:
            result = await replay_task(runtime, domain, task, isolation)
            report.results.append(result)
            if progress is not None:
                progress(result)
    report.seconds = time.perf_counter() - started
    return report
