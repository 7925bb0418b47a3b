"""`envreg episode`: the main job: an agent episode over MCP in a real sandbox, and its reward."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.console import Console

from envreg.cli.output import JsonOpt, fail, print_json
from envreg.protocol import MCP_SESSION_VERSION, MCP_VERSION, TIERS

console = Console(emoji=False, soft_wrap=True)


def episode(
    env: Annotated[
        str, typer.Argument(help="Environment name (images/<name>) with validation scenarios.")
    ] = "calendar",
    scenario: Annotated[str | None, typer.Option(help="Scenario name (default: the first).")] = None,
    isolation: Annotated[
        str,
        typer.Option(
            help="container or instance (Docker, through the gateway), or local (the environment server in "
            "this process, unsandboxed: no Docker needed)."
        ),
    ] = "container",
    protocol: Annotated[
        str, typer.Option(help=f"MCP protocol: {MCP_VERSION} or {MCP_SESSION_VERSION}.")
    ] = MCP_VERSION,
    as_json: JsonOpt = False,
) -> None:
    """Play a scenario's calls as a scripted agent over MCP in a sandbox; print calls, state hash, reward."""
    import anyio

    from envreg.env import load_environment, load_scenarios
    from envreg.episode import play, score_episode, short

    if isolation not in TIERS:
        raise fail(f"bad --isolation {isolation!r}", f"one of {', '.join(TIERS)}", 2)
    if protocol not in (MCP_VERSION, MCP_SESSION_VERSION):
        raise fail(f"bad --protocol {protocol!r}", f"{MCP_VERSION} or {MCP_SESSION_VERSION}", 2)
    environment = load_environment(env)
    scenarios, _ = load_scenarios(environment.folder)
    chosen = next((s for s in scenarios if scenario in (None, s.name)), None)
    if chosen is None:
        have = ", ".join(s.name for s in scenarios) or "none"
        raise fail(f"no scenario {scenario!r} in {env}", f"pick one of: {have}", 2)
    printer = Console(emoji=False, stderr=True, soft_wrap=True) if as_json else console

    def show(tool: str, arguments: dict[str, Any], outcome: Any) -> None:
        mark = "[red]error[/]" if outcome.is_error else "[green]ok[/]"
        printer.print(f"  {mark} {tool}({short(arguments, 70)}) -> {short(outcome.text)}")

    def header(sandbox: Any) -> None:
        printer.print(
            f"[bold]{env}[/] {environment.version} · scenario [bold]{chosen.name}[/] · "
            f"sandbox {sandbox.id} ({isolation}) · MCP {sandbox.mcp_url} · protocol {protocol}"
        )

    async def main() -> Any:
        if isolation == "local":
            from envreg.server.local import local_sandbox

            async with local_sandbox(environment, chosen.initial_state) as sandbox:
                header(sandbox)
                report = await play(sandbox, chosen, environment.volatile, show, protocol)
        else:
            from envreg.runtime import Runtime

            async with Runtime() as rt:
                sandbox = await rt.sandbox(env, isolation=isolation, state=chosen.initial_state)
                header(sandbox)
                report = await play(sandbox, chosen, environment.volatile, show, protocol)
        report.reward = await score_episode(environment, chosen, report)
        return report

    report = anyio.run(main)
    r = report.reward
    if as_json:
        print_json(
            {
                "env": environment.name,
                "version": environment.version,
                "scenario": chosen.name,
                "isolation": isolation,
                "calls": [
                    {"tool": t, "arguments": a, "is_error": o.is_error, "text": o.text}
                    for t, a, o in report.calls
                ],
                "final_state_sha256": report.final_sha256,
                "state_matches": report.state_matches,
                "reward": r.model_dump(mode="json"),
                "failures": report.failures,
            }
        )
    else:
        matches = {True: "[green]yes[/]", False: "[red]no[/]", None: "n/a"}[report.state_matches]
        console.print(f"calls: {len(report.calls)}")
        console.print(f"final state sha256: {report.final_sha256}")
        console.print(f"matches the scenario's expected state: {matches}")
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
