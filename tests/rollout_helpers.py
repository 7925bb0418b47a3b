"""Shared by the rollout tests: catalog tasks, a two-turn task with per-turn oracle states, a runner."""

from __future__ import annotations

from contextlib import asynccontextmanager
from functools import cache
from typing import Any

from envreg.canonical import canonical_json, sha256_hex
from envreg.env import load_environment, load_scenarios
from envreg.reward.truth import TruthCall
from envreg.rollout import ChatPolicy, EpisodeOptions, Rollouts, Task, TaskTurn, scenario_tasks
from envreg.runtime import Runtime
from envreg.standin import Scripted, StandInLLM


@cache
def catalog_tasks(*envs: str) -> tuple[Task, ...]:
    return tuple(scenario_tasks(envs))


def two_turn_task(env: str = "bank", scenario: str = "pay_new_payee_chain") -> Task:
    """A scenario's steps split into two user turns, each with the oracle's state after it."""
    environment = load_environment(env)
    chosen = next(s for s in load_scenarios(environment.folder)[0] if s.name == scenario)
    initial = chosen.initial_state or environment.initial_state().to_json()
    instance = environment.instance(initial)
    half = len(chosen.steps) // 2
    turns = []
    for k, steps in enumerate((chosen.steps[:half], chosen.steps[half:])):
        calls = [
            TruthCall(
                env=env,
                tool=s.tool,
                arguments=s.arguments,
                is_error=instance.call_tool(s.tool, s.arguments).is_error,
            )
            for s in steps
        ]
        turns.append(
            TaskTurn(user=f"part {k + 1} of {scenario}", calls=calls, states={env: instance.state.to_json()})
        )
    return Task(
        id=f"{env}/{scenario}/two-turns",
        envs=[env],
        initial_states={env: initial},
        turns=turns,
        final_states={env: instance.state.to_json()},
        volatile={env: list(environment.volatile)},
    )


def state_hash(state: dict[str, Any]) -> str:
    return sha256_hex(canonical_json(state))


@asynccontextmanager
async def rollouts(
    policy, tasks=(), *, latency: float = 0.0, options: EpisodeOptions | None = None, **runtime: Any
):
    """A stand-in model playing `tasks` with `policy` (a script name or a callable), and a runner on it."""
    served = Scripted(tasks, policy) if isinstance(policy, str) else policy
    with StandInLLM(served, latency=latency) as llm:
        async with Runtime(**runtime) as rt:
            chat = ChatPolicy(llm.base_url, "standin")
            runner = Rollouts(rt, chat, options)
            runner.llm = llm  # type: ignore[attr-defined]
            try:
                yield runner
            finally:
                await runner.aclose()
                await chat.aclose()
