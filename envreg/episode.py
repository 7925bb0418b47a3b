"""A scripted agent episode: an MCP client plays a validation scenario in a sandbox, then it is scored."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx2

from envreg.canonical import canonical_json, sha256_hex
from envreg.env import Scenario, states_equal
from envreg.env.scenario import CallOutcome, run_steps
from envreg.protocol import MCP_SESSION_VERSION, MCP_VERSION
from envreg.runtime import Sandbox


@dataclass
class EpisodeReport:
    scenario: str
    calls: list[tuple[str, dict[str, Any], CallOutcome]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    final_sha256: str = ""
    state_matches: bool | None = None

    @property
    def trace_score(self) -> float:
        """Share of calls whose result was what the scenario expected."""
        if not self.calls:
            return 0.0
        failed_steps = {f.split(" ", 2)[1] for f in self.failures if f.startswith("step ")}
        return 1 - len(failed_steps) / len(self.calls)

    def reward(self, alpha: float = 0.5) -> float:
        """``alpha * R_traj + (1 - alpha) * R_state`` (R_state is 1 when the final state matches)."""
        return alpha * self.trace_score + (1 - alpha) * float(bool(self.state_matches))


async def play(
    sandbox: Sandbox,
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
    async with httpx2.AsyncClient(headers=headers, timeout=60) as http:
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
