"""`envreg episode`: the main job: an agent episode over MCP in a real sandbox, and its reward."""

from __future__ import annotations

from typing import Annotated

import anyio
import typer
from rich.console import Console

from envreg.protocol import MCP_SESSION_VERSION, MCP_VERSION

console = Console(soft_wrap=True)


def episode(
    env: Annotated[
        str, typer.Argument(help="Environment name (images/<name>) with validation scenarios.")
    ] = "calendar",
    scenario: Annotated[str | None, typer.Option(help="Scenario name (default: the first).")] = None,
    isolation: Annotated[
        str, typer.Option(help="container or instance (Docker), through the gateway.")
    ] = "container",
    protocol: Annotated[
        str, typer.Option(help=f"MCP protocol: {MCP_VERSION} or {MCP_SESSION_VERSION}.")
    ] = MCP_VERSION,
) -> None:
    """Play a scenario's calls as a scripted agent over MCP in a sandbox; print calls, state hash, reward."""
    from envreg.env import load_environment, load_scenarios
    from envreg.episode import play, score_episode, short
    from envreg.runtime import EngineError, Runtime

    environment = load_environment(env)
    scenarios, _ = load_scenarios(environment.folder)
    chosen = next((s for s in scenarios if scenario in (None, s.name)), None)
    if chosen is None:
        console.print(
            f"[red]error:[/] no scenario {scenario!r} in {env}; have: {', '.join(s.name for s in scenarios)}"
        )
        raise typer.Exit(2)

    def show(tool, arguments, outcome) -> None:
        mark = "[red]error[/]" if outcome.is_error else "[green]ok[/]"
        console.print(f"  {mark} {tool}({short(arguments, 70)}) -> {short(outcome.text)}")

    async def main():
        async with Runtime() as rt:
            sandbox = await rt.sandbox(env, isolation=isolation, state=chosen.initial_state)
            console.print(
                f"[bold]{env}[/] {environment.version} · scenario [bold]{chosen.name}[/] · "
                f"sandbox {sandbox.id} ({isolation}) · MCP {sandbox.mcp_url} · protocol {protocol}"
            )
            report = await play(sandbox, chosen, environment.volatile, show, protocol)
        report.reward = await score_episode(environment, chosen, report)
        return report

    try:
        report = anyio.run(main)
    except EngineError as exc:
        console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(1) from None
    matches = {True: "[green]yes[/]", False: "[red]no[/]", None: "n/a"}[report.state_matches]
    console.print(f"calls: {len(report.calls)}")
    console.print(f"final state sha256: {report.final_sha256}")
    console.print(f"matches the scenario's expected state: {matches}")
    r = report.reward
    console.print(
        f"reward = 0.5·R_traj + 0.5·R_state - 0.1·P_length - 0.1·P_format = 0.5·{r.r_traj:.3f} + 0.5·"
        f"{r.r_state:.3f} - 0.1·{r.p_length:.3f} - 0.1·{r.p_format:.3f} = [bold]{r.reward:.3f}[/]"
        f" ({r.matched_calls}/{r.expected_calls} oracle calls matched, replayed on the local tier)"
    )
    for failure in report.failures:
        console.print(f"[red]mismatch:[/] {failure}")
    if report.failures or report.state_matches is False:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("episode")(episode)
