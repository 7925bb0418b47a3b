"""`envreg import envfactory`: an EnvFactory tool file as an envreg environment folder, inspected in a sandbox."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from envreg.cli.output import JsonOpt, err, fail, print_json

app = typer.Typer(help="Import environments written for other frameworks.", no_args_is_help=True)


@app.command("envfactory")
def envfactory(
    tool_file: Annotated[Path, typer.Argument(help="The EnvFactory tool file (one Python module).")],
    metadata: Annotated[
        Path, typer.Option("--metadata", help="Its metadata JSON (class_name, description, tools).")
    ],
    name: Annotated[
        str | None,
        typer.Option(
            help="Environment name, [a-z0-9][a-z0-9-]* (default: the metadata's class_name in kebab case)."
        ),
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
    force: Annotated[
        bool, typer.Option("--force", help="Write into an existing folder of that name.")
    ] = False,
    timeout: Annotated[float, typer.Option(help="Seconds the inspection may take in its sandbox.")] = 300.0,
    as_json: JsonOpt = False,
) -> None:
    """Inspect TOOL_FILE in a container sandbox (never on this host), then copy it and its metadata unchanged
    into images/<name>/ with an env.py serving its @mcp.tool functions, a seed and a recorded scenario."""
    out = (
        Console(emoji=False, stderr=True) if as_json else Console(emoji=False)
    )  # --json: the report to stderr, JSON to stdout
    from envreg.adapters import envfactory as ef
    from envreg.adapters.envfactory_import import FOREIGN_MARKER, write_folder
    from envreg.errors import EnvregError
    from envreg.sandboxing import run_isolated

    for path in (tool_file, metadata, *(p for p in (seed, scenarios) if p)):
        if not path.exists():
            raise fail(f"{path} does not exist", code=2)
    try:
        meta = ef.read_metadata(metadata)
        env_name = ef.check_name(name if name is not None else ef.kebab(meta.class_name))
        seed_data = json.loads(seed.read_text()) if seed else None
        scenario_files = (
            {
                str(p.relative_to(scenarios)): p.read_bytes()
                for p in [*sorted(scenarios.glob("*.json")), *sorted(scenarios.glob("rejected/*.json"))]
            }
            if scenarios
            else {}
        )
        parsed = {rel: json.loads(data) for rel, data in scenario_files.items()}
    except (ef.ImportProblem, ValueError) as exc:
        raise fail(str(exc)) from None
    if tool_file.name in ("env.py", FOREIGN_MARKER) or tool_file.name == metadata.name:
        raise fail(
            f"the tool file cannot be named {tool_file.name} (the folder's env.py and {FOREIGN_MARKER} are envreg's)"
        )
    root = images.resolve()
    folder = (images / env_name).resolve()
    if folder.parent != root:  # the name rule already keeps it there; this is the guarantee
        raise fail(f"{folder} is not inside {root}")
    if folder.exists() and not force:
        raise fail(
            f"{images / env_name} exists",
            "pass --force to write into it, or --name to import under another name",
        )

    files = {tool_file.name: tool_file.read_bytes(), metadata.name: metadata.read_bytes()}
    payload = {
        "tool": tool_file.name,
        "metadata": metadata.name,
        "name": env_name,
        "version": version,
        "domain": domain,
        "seed": seed_data,
        "scenarios": [v for k, v in parsed.items() if not k.startswith("rejected/")],
        "rejected": [v for k, v in parsed.items() if k.startswith("rejected/")],
    }
    with err.status(f"inspecting {tool_file.name} in a container sandbox (no network)"):
        try:
            report = run_isolated(
                "envreg.adapters.envfactory_import:inspect_tool_file",
                payload,
                files=files,
                timeout=timeout,
                what=f"the tool file {tool_file.name}",
            )
        except EnvregError as exc:
            raise fail(exc.message, exc.hint) from None
    if not report["ok"]:
        raise fail(report["problem"], "nothing was written; fix the tool file or its metadata")

    written = write_folder(
        folder,
        files,
        tool=tool_file.name,
        metadata=metadata.name,
        report=report,
        name=env_name,
        version=version,
        domain=domain,
        seed=seed_data,
        scenarios=scenario_files,
    )
    out.print(
        f"[green]imported[/] {report['class']} (the object `{report['object']}` its tools call) from "
        f"{escape(tool_file.name)} as [bold]{env_name}[/] {escape(version)} -> {escape(str(images / env_name))}/",
        highlight=False,
    )
    out.print(
        f"  {len(report['tools'])} tools (its @mcp.tool functions): {', '.join(report['tools'])}",
        highlight=False,
    )
    out.print(f"  files: {', '.join(str(p.relative_to(folder)) for p in written)}", highlight=False)
    for note in report["notes"]:
        out.print(f"  [yellow]note:[/] {escape(note)}", highlight=False)
    if report["network"]:
        out.print(
            f"  [yellow]network:[/] imports {', '.join(report['network'])}; envreg runs it without network "
            "(such calls fail)",
            highlight=False,
        )
    for item in report["nondeterministic"]:
        if item["differs"] == "network":
            out.print(
                f"  [yellow]network:[/] {item['tool']} reaches for the network, which is blocked: left out of the "
                "recorded scenario",
                highlight=False,
            )
            continue
        out.print(
            f"  [yellow]non-deterministic:[/] {item['tool']}: its {item['differs']} differs between two runs "
            "(uuid4 ids, the clock or unseeded randomness): left out of the recorded scenario; rollouts that call "
            "it cannot be replayed byte for byte",
            highlight=False,
        )
    checks = list(report["checks"])
    if report["round_trip"] is not None:
        checks.insert(0, {"name": "seed round-trip", "passed": False, "evidence": report["round_trip"]})
    else:
        checks.insert(
            0,
            {
                "name": "seed round-trip",
                "passed": True,
                "evidence": "save_scenario -> load_scenario -> save_scenario gives the same state",
            },
        )
    table = Table(title=f"checks of {env_name} (in its sandbox)")
    for col in ("check", "result", "evidence"):
        table.add_column(col, overflow="fold")
    for check in checks:
        mark = {True: "[green]pass[/]", False: "[red]fail[/]", None: "[yellow]skip[/]"}[check["passed"]]
        table.add_row(check["name"], mark, escape(check["evidence"]))
    out.print(table)
    failed = [c for c in checks if c["passed"] is False]
    for check in failed:
        err.print(f"[red]fail:[/] {check['name']}: {escape(check['evidence'])}", highlight=False)
    if as_json:
        print_json(
            {
                "name": env_name,
                "version": version,
                "folder": str(folder),
                "tools": list(report["tools"]),
                "files": [str(p.relative_to(folder)) for p in written],
                "checks": checks,
            }
        )
    if failed:
        raise fail(
            f"{env_name} was imported into {images / env_name}/ but fails the checks above",
            "fix the tool file (envreg validate will refuse its image as it is)",
        )
    out.print(
        f"next: `envreg manifest {env_name}` and `envreg build {env_name}` (both run its code in a container)"
    )


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="import")
