"""`envreg manifest`: generate or check the committed manifests."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from envreg.cli.output import JsonOpt, err, fail, print_json

out = Console(emoji=False)


def manifest(
    envs: Annotated[
        list[str] | None, typer.Argument(help="Environment folders or names (default: all in ./images).")
    ] = None,
    check: Annotated[
        bool, typer.Option("--check", help="Write nothing; exit 1 when a manifest is stale.")
    ] = False,
    out_dir: Annotated[Path, typer.Option("--out", help="Manifests folder.")] = Path("manifests"),
    as_json: JsonOpt = False,
) -> None:
    """Generate manifests/<name>.json from each environment's code."""
    from envreg.config import images_root
    from envreg.env import EnvironmentNotFound
    from envreg.env.loader import known_names
    from envreg.manifest import check_manifest, manifest_of, write_manifest

    refs = envs or known_names()
    if not refs:
        raise fail(
            f"no environments given and none found under {images_root()}/",
            "name environment folders, or run it where ./images holds them (or set ENVREG_IMAGES)",
            2,
        )
    stale, rows = [], []
    for ref in refs:
        try:
            env = manifest_of(ref)  # a foreign folder's in a container sandbox
        except (EnvironmentNotFound, TypeError, ValueError) as exc:
            raise fail(str(exc), getattr(exc, "hint", None) or "check the environment's env.py", 2) from None
        if check:
            problem = check_manifest(env, out_dir)
            rows.append({"name": env.name, "version": env.version, "stale": problem})
            if problem:
                stale.append(env.name)
                err.print(f"[red]stale:[/] {env.name}: {problem}")
            elif not as_json:
                out.print(f"[green]ok[/] {env.name} {env.version}")
        else:
            path, m, changed = write_manifest(env, out_dir)
            rows.append(
                {"name": env.name, "path": str(path), "digest": m.digests.manifest, "changed": changed}
            )
            if not as_json:
                status = "[yellow]wrote[/]" if changed else "[green]unchanged[/]"
                out.print(f"{status} {path} {m.digests.manifest[:19]} ({len(m.tools)} tools)")
    if as_json:
        print_json(rows)
    if stale:
        raise fail(
            f"{len(stale)} stale manifest(s)",
            f"run `envreg manifest {' '.join(stale)}` and commit the result",
        )


def register(app: typer.Typer) -> None:
    app.command("manifest")(manifest)
