"""`envreg catalog`: the environments of this tree, from the committed manifests; keeps the README table current."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from envreg.cli.output import QuietOpt, err, fail

out = Console(emoji=False, highlight=False, width=None if sys.stdout.isatty() else 200)


def catalog(
    manifests: Annotated[
        Path | None,
        typer.Option(
            "--manifests",
            help="Folder of the manifests (default: $ENVREG_MANIFESTS, ./manifests, else the installed catalog's).",
            show_default=False,
        ),
    ] = None,
    readme: Annotated[
        Path | None,
        typer.Option("--readme", help="Rewrite the catalog table between the markers in this file."),
    ] = None,
    check: Annotated[
        bool, typer.Option("--check", help="With --readme: write nothing; exit 1 when the table is stale.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON on stdout.")] = False,
    as_markdown: Annotated[
        bool, typer.Option("--markdown", help="Print the Markdown table on stdout.")
    ] = False,
    quiet: QuietOpt = False,
) -> None:
    """List the catalog (environment, domain, tools, scenarios, what it is) from manifests/."""
    from envreg import catalog as cat
    from envreg.config import manifests_root

    if check and readme is None:
        raise fail("--check without --readme", "`envreg catalog --readme README.md --check`", 2)
    manifests = manifests or manifests_root()
    try:
        entries = cat.load(manifests)
    except ValueError as exc:
        raise fail(
            str(exc), "generate them with `envreg manifest`, or point --manifests at a folder of them"
        ) from None
    table = cat.markdown(entries)
    if readme is not None:
        try:
            text = readme.read_text()
            updated = cat.replace_section(text, table)
        except (OSError, ValueError) as exc:
            raise fail(f"{readme}: {exc}", "give the README that holds the catalog markers") from None
        if check:
            if updated != text:
                raise fail(
                    f"stale: the catalog table in {readme} does not match {manifests}/",
                    f"run `envreg catalog --readme {readme}` and commit the result",
                )
            err.print(f"[green]ok[/] {readme}: the catalog table is current ({len(entries)} environments)")
            return
        if updated != text:
            readme.write_text(updated)
            err.print(f"[yellow]wrote[/] {readme} ({len(entries)} environments)")
        else:
            err.print(f"[green]unchanged[/] {readme}")
        return
    if as_json:
        sys.stdout.write(json.dumps([e.to_json() for e in entries], indent=2) + "\n")
        return
    if quiet:
        sys.stdout.write("".join(f"{e.name}\n" for e in entries))
        return
    if as_markdown:
        sys.stdout.write(table)
        return
    view = Table(box=None, pad_edge=False)
    for col, justify in (
        ("ENVIRONMENT", "left"),
        ("DOMAIN", "left"),
        ("TOOLS", "right"),
        ("SCENARIOS", "right"),
    ):
        view.add_column(col, justify=justify)  # type: ignore[arg-type]
    view.add_column("WHAT IT IS", overflow="fold")
    for e in entries:
        view.add_row(e.name, e.domain, str(e.tools), str(e.scenarios), e.summary)
    out.print(view)
    out.print(table.rstrip().splitlines()[-1])


def register(app: typer.Typer) -> None:
    app.command("catalog")(catalog)
