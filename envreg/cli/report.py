"""`envreg report FILE... --html OUT/`: the web console's pages for trajectory, rollout and validation files,
as static HTML (a CI artifact)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from envreg.cli.output import err, fail


def report(
    files: Annotated[
        list[Path],
        typer.Argument(
            help="Trajectory or rollout files (JSON Lines / JSON list), `envreg validate --json` reports, a tool "
            "graph from `envreg synth graph`.",
            show_default=False,
        ),
    ],
    html: Annotated[
        Path | None,
        typer.Option("--html", help="Folder to write the pages to (index.html first).", show_default=False),
    ] = None,
    catalog: Annotated[
        bool,
        typer.Option("--catalog/--no-catalog", help="Also write the catalog's pages (from the manifests)."),
    ] = True,
    manifests: Annotated[
        Path | None,
        typer.Option(
            "--manifests", help="Folder of the manifests (default: as `envreg catalog`).", show_default=False
        ),
    ] = None,
) -> None:
    """Write the console's pages for trajectory, rollout and validation files as static HTML under --html OUT/.

    Rewards are scored as `envreg reward score` scores them.
    """
    import anyio

    from envreg.config import images_root, manifests_root
    from envreg.console.catalog import Catalog
    from envreg.console.export import export
    from envreg.runtime import Runtime

    if html is None:
        raise fail("no output folder", "give one with --html OUT/ (static pages are the only report form)", 2)
    pages_catalog = Catalog(manifests or manifests_root(), images_root()) if catalog else None

    async def main() -> int:
        async with Runtime(gateway=False) as rt:
            return await export(files, html, pages_catalog, rt, lambda label: err.print(f"rendering {label}"))

    try:
        written = anyio.run(main)
    except ValueError as exc:
        raise fail(
            str(exc),
            "give the files `envreg synth`, `envreg eval`, `envreg reward` or `envreg validate --json` wrote",
            2,
        ) from None
    err.print(f"[green]wrote[/] {written} pages to {html}/ (open {html / 'index.html'})")


def register(app: typer.Typer) -> None:
    app.command("report")(report)
