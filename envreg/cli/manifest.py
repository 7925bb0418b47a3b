"""`envreg manifest`: generate or check the committed manifests."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

err = Console(stderr=True)
out = Console()


def manifest(
    envs: Annotated[
        list[str] | None, typer.Argument(help="Environment folders or names (default: all in ./images).")
    ] = None,
    check: Annotated[
        bool, typer.Option("--check", help="Write nothing; exit 1 when a manifest is stale.")
    ] = False,
    out_dir: Annotated[Path, typer.Option("--out", help="Manifests folder.")] = Path("manifests"),
) -> None:
    """Generate manifests/<name>.json from each environment's code."""
    from envreg.env import EnvironmentNotFound
    from envreg.env.loader import known_names
    from envreg.errors import EnvregError
    from envreg.manifest import check_manifest, manifest_of, write_manifest

    refs = envs or known_names()
    if not refs:
        err.print("[red]error:[/] no environments given and none found under ./images")
        raise typer.Exit(2)
    stale = []
    for ref in refs:
        try:
            env = manifest_of(ref)  # a foreign folder's in a container sandbox
        except (EnvironmentNotFound, TypeError, ValueError, EnvregError) as exc:
            err.print(f"[red]error:[/] {exc}")
            raise typer.Exit(2) from None
        if check:
            if problem := check_manifest(env, out_dir):
                stale.append(env.name)
                err.print(f"[red]stale:[/] {env.name}: {problem}")
            else:
                out.print(f"[green]ok[/] {env.name} {env.version}")
        else:
            path, m, changed = write_manifest(env, out_dir)
            status = "[yellow]wrote[/]" if changed else "[green]unchanged[/]"
            out.print(f"{status} {path} {m.digests.manifest[:19]} ({len(m.tools)} tools)")
    if stale:
        err.print(f"run `envreg manifest {' '.join(stale)}` and commit the result")
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("manifest")(manifest)
