"""`envreg import envfactory`: turn an EnvFactory tool file into an envreg environment folder, and check it."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from envreg.cli.output import JsonOpt, fail, print_json

out = Console()
err = Console(stderr=True)

app = typer.Typer(help="Import environments written for other frameworks.", no_args_is_help=True)


@app.command("envfactory")
def envfactory(
    tool_file: Annotated[Path, typer.Argument(help="The EnvFactory tool file (one Python module).")],
    metadata: Annotated[
        Path, typer.Option("--metadata", help="Its metadata JSON (class_name, description, tools).")
    ],
    name: Annotated[
        str | None, typer.Option(help="Environment name (default: the class name in kebab case).")
    ] = None,
    version: Annotated[str, typer.Option(help="Environment version.")] = "1.0.0",
    domain: Annotated[str, typer.Option(help="Environment domain.")] = "general",
    seed: Annotated[
        Path | None, typer.Option(help="A scenario (what load_scenario takes) to start new sandboxes from.")
    ] = None,
    scenarios: Annotated[
        Path | None,
        typer.Option(
            help="A folder of envreg validation scenarios (*.json, rejected/*.json) to ship and run."
        ),
    ] = None,
    images: Annotated[Path, typer.Option(help="Environments folder the new folder goes into.")] = Path(
        "images"
    ),
    force: Annotated[bool, typer.Option("--force", help="Replace an existing folder of that name.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Copy TOOL_FILE and its metadata unchanged into images/<name>/ with an env.py serving them; check the result."""
    from envreg.adapters import envfactory as ef

    show = Console(stderr=True) if as_json else out  # --json: the report goes to stderr, JSON to stdout
    from envreg.adapters.checks import check_environment
    from envreg.env import load_environment, load_scenarios
    from envreg.env.loader import _load

    for path in (tool_file, metadata, *(p for p in (seed, scenarios) if p)):
        if not path.exists():
            raise fail(f"{path} does not exist", code=2)
    try:
        meta = ef.read_metadata(metadata)
        source = ef.check_syntax(tool_file)
        seed_data = json.loads(seed.read_text()) if seed else None
    except (ef.ImportProblem, ValueError) as exc:
        raise fail(f"{exc}", code=1) from None
    env_name = name or ef.kebab(meta.class_name)
    folder = images / env_name
    if folder.exists() and not force:
        raise fail(f"{folder} exists", "pass --force to replace it, or --name to import under another name")
    scenario_files = (
        sorted(scenarios.glob("*.json")) + sorted(scenarios.glob("rejected/*.json")) if scenarios else []
    )
    try:
        ef.environment(
            tool_file, metadata, name=env_name, version=version, domain=domain
        )  # fails before writing
        written = ef.write_folder(
            tool_file,
            metadata,
            folder,
            name=env_name,
            version=version,
            domain=domain,
            seed=seed_data,
            scenarios=scenario_files,
        )
        _load.cache_clear()
        env = load_environment(folder)
        env.parse_state(env.initial_state().to_json())
    except (ef.ImportProblem, ValueError) as exc:
        raise fail(f"{exc}", code=1) from None

    show.print(
        f"[green]imported[/] {meta.class_name} from {tool_file.name} as [bold]{env.name}[/] {env.version} -> {folder}/"
    )
    show.print(
        f"  {len(env.tools)} tools: {', '.join(env.tools)}; load_scenario / save_scenario are the control plane's"
    )
    show.print(f"  files: {', '.join(str(p.relative_to(folder)) for p in written)}")
    if net := ef.network_imports(source):
        show.print(
            f"  [yellow]network:[/] imports {', '.join(net)}; envreg runs it without network (calls are refused)"
        )

    logging.getLogger("envreg.env").setLevel(logging.ERROR)  # tool failures are results here, not log noise
    checks = check_environment(env, load_scenarios(folder)[0])
    table = Table(title=f"checks of {env.name} (in process)")
    table.add_column("check")
    table.add_column("result")
    table.add_column("evidence", overflow="fold")
    for check in checks:
        mark = {True: "[green]pass[/]", False: "[red]fail[/]", None: "[yellow]skip[/]"}[check.passed]
        table.add_row(check.name, mark, check.evidence)
    show.print(table)
    failed = [c for c in checks if c.passed is False]
    for check in failed:
        err.print(f"[red]fail:[/] {check.name}: {check.evidence}", markup=True, highlight=False)
    if as_json:
        print_json(
            {
                "name": env.name,
                "version": env.version,
                "folder": str(folder),
                "tools": list(env.tools),
                "files": [str(p.relative_to(folder)) for p in written],
                "checks": [{"name": c.name, "passed": c.passed, "evidence": c.evidence} for c in checks],
            }
        )
    if failed:
        raise fail(
            f"{env.name} was imported into {folder}/ but fails the checks above",
            "fix the tool file (envreg validate will refuse its image as it is)",
        )
    show.print(f"next: `envreg manifest {env.name}` and `envreg build {env.name}`")


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="import")
