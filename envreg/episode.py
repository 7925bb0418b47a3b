"""A scripted agent episode: an MCP client plays a validation scenario in a sandbox, then it is scored."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from envreg.canonical import canonical_json, sha256_hex
from envreg.env import Environment, Scenario, states_equal
from envreg.env.scenario import CallOutcome, run_steps
from envreg.http.client import async_client
from envreg.protocol import MCP_SESSION_VERSION, MCP_VERSION
from envreg.reward.score import RewardBreakdown, ScoreOptions


class McpSandbox(Protocol):
    """What an episode needs of a sandbox: its MCP URL, its token and its state (a runtime `Sandbox`, or
    `envreg.server.local.LocalSandbox`)."""

    mcp_url: str | None
    token: str | None

    async def state(self) -> dict[str, Any]: ...


@dataclass
class EpisodeReport:
    scenario: str
    calls: list[tuple[str, dict[str, Any], CallOutcome]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    final_sha256: str = ""
    state_matches: bool | None = None

    reward: RewardBreakdown | None = None


async def score_episode(
    environment: Environment, scenario: Scenario, report: EpisodeReport, options: ScoreOptions | None = None
) -> RewardBreakdown:
    """The composite reward of the calls the agent made (`envreg.reward`), against the scenario as the oracle.

    The oracle's calls and final state come from executing the scenario's steps on its initial state;
    the agent's calls are replayed on the local tier from the same state.
    """
    from envreg.reward.score import Scorer
    from envreg.runtime import Runtime

    initial = scenario.initial_state or environment.initial_state().to_json()
    oracle = environment.instance(initial)
    calls = []
    for step in scenario.steps:
        outcome = oracle.call_tool(step.tool, step.arguments)
        calls.append(
            {
                "env": environment.name,
                "tool": step.tool,
                "arguments": step.arguments,
                "is_error": outcome.is_error,
            }
        )
    truth = {
        "id": scenario.name,
        "envs": [environment.name],
        "calls": calls,
        "initial_states": {environment.name: initial},
        "final_states": {environment.name: scenario.final_state or oracle.state.to_json()},
        "volatile": {environment.name: list(environment.volatile)},
    }
    predicted = {"calls": [{"env": environment.name, "tool": t, "arguments": a} for t, a, _ in report.calls]}
    async with Runtime() as rt:
        return await Scorer(rt, options=options, sources={environment.name: str(environment.folder)}).score(
            truth, predicted
        )


async def play(
    sandbox: McpSandbox,
    scenario: Scenario,
    volatile: tuple[str, ...] = (),
    on_call: Callable[[str, dict[str, Any], CallOutcome], None] | None = None,
    protocol: str = MCP_VERSION,
) -> EpisodeReport:
    """Drive the scenario's calls through the sandbox's MCP URL with the `mcp` SDK client."""
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    report = EpisodeReport(scenario.name)
    if sandbox.mcp_url is None:
        raise ValueError("an episode needs a sandbox with an MCP URL (isolation container or instance)")
    headers = {"authorization": f"Bearer {sandbox.token}"}
    async with async_client(headers=headers, timeout=60) as http:
        transport = streamable_http_client(sandbox.mcp_url, http_client=http)
        async with Client(
            transport, mode=protocol if protocol != MCP_SESSION_VERSION else "legacy"
        ) as client:
            await client.list_tools()

            async def call(tool: str, arguments: dict[str, Any]) -> CallOutcome:
                result = await client.call_tool(tool, arguments)
                outcome = CallOutcome(bool(result.is_error), result.content[0].text if result.content else "")
                report.calls.append((tool, arguments, outcome))
                if on_call:
                    on_call(tool, arguments, outcome)
                return outcome

            report.failures = await run_steps(scenario, call)
    final_state = await sandbox.state()
    report.final_sha256 = sha256_hex(canonical_json(final_state))
    if scenario.final_state is not None:
        report.state_matches = states_equal(final_state, scenario.final_state, volatile)
    return report


def short(value: Any, limit: int = 96) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 1] + "…"
