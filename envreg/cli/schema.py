"""`envreg schema`: the JSON Schemas of envreg's files and the OpenAPI documents of its HTTP fronts."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from envreg.cli.output import err, fail


def schema(
    name: Annotated[
        str | None,
        typer.Argument(
            help="manifest, scenario, rejected-state, trajectory, lock, openapi-daemon or openapi-reward.",
            show_default=False,
        ),
    ] = None,
    write: Annotated[
        Path | None, typer.Option("--write", metavar="DIR", help="Write every one into DIR (e.g. schemas).")
    ] = None,
    check: Annotated[
        Path | None,
        typer.Option("--check", metavar="DIR", help="Write nothing; exit 1 when a copy in DIR is stale."),
    ] = None,
    list_names: Annotated[bool, typer.Option("--list", help="List the names.")] = False,
) -> None:
    """Print the JSON Schema of an envreg file format (manifest, scenario, trajectory, lock).

    Always JSON on stdout; the committed copies are schemas/*.json (`--check schemas` in CI)."""
    from envreg import schemas

    names = ", ".join(schemas.SCHEMAS)
    if list_names:
        sys.stdout.write("".join(f"{n}\n" for n in schemas.SCHEMAS))
        return
    if check is not None:
        if stale := schemas.stale(check):
            raise fail(
                f"stale in {check}/: {', '.join(stale)}",
                f"run `envreg schema --write {check}` and commit the result (a format changed: review it)",
            )
        err.print(f"[green]ok[/] {check}/: {len(schemas.SCHEMAS)} documents match the code")
        return
    if write is not None:
        for path in schemas.write(write):
            err.print(f"[yellow]wrote[/] {path}")
        return
    if name is None:
        raise fail("no schema named", f"`envreg schema NAME` with NAME one of: {names}", 2)
    if name not in schemas.SCHEMAS:
        raise fail(f"no schema {name!r}", f"one of: {names}", 2)
    sys.stdout.write(schemas.dumps(schemas.SCHEMAS[name]()))


def register(app: typer.Typer) -> None:
    app.command("schema")(schema)
