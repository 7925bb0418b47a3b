"""`envreg validate`: run the conformance checks against real containers of environment images."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from envreg.cli.output import fail

err = Console(emoji=False, stderr=True, highlight=False)
out = Console(emoji=False, highlight=False, width=None if sys.stdout.isatty() else 160)

STYLE = {"pass": "green", "fail": "bold red", "skip": "yellow"}


def _list_checks() -> None:
    from envreg.validate import CHECKS

    table = Table("check", "what it proves", box=None, pad_edge=False)
    for c in CHECKS.values():
        table.add_row(c.name, c.description)
    out.print(table)


def _render(report) -> None:  # type: ignore[no-untyped-def]
    from envreg.validate import Status

    head = Text.assemble((report.label, "bold"))
    if report.image_id:
        head.append(f"  image {report.image_id.removeprefix('sha256:')[:12]}", "dim")
        head.append(f"  manifest {str(report.manifest_digest).removeprefix('sha256:')[:12]}", "dim")
    out.print(head)
    if report.error:
        out.print(Text.assemble(("  error: ", "bold red"), report.error))
    if not report.results:
        return
    table = Table(box=None, pad_edge=False, show_header=False, padding=(0, 1, 0, 2))
    table.add_column("check", no_wrap=True)
    table.add_column("result", no_wrap=True)
    table.add_column("summary", overflow="fold")
    table.add_column("time", justify="right", no_wrap=True)
    for r in report.results:
        table.add_row(r.name, Text(str(r.status), STYLE[str(r.status)]), r.summary, f"{r.seconds:.1f}s")
        if r.status is Status.FAIL or (r.status is Status.SKIP and r.evidence):
            for line in r.evidence:
                table.add_row("", "", Text(f"- {line}", "dim"), "")
    out.print(table)


def _footer(report) -> Text:  # type: ignore[no-untyped-def]
    from envreg.validate import Status

    if report.error:
        return Text.assemble(
            (f"{report.label}: ", "bold"), ("error", "bold red"), f" in {report.seconds:.1f}s"
        )
    verdict = ("passed", "green") if report.passed else ("FAILED", "bold red")
    counts = ", ".join(f"{report.count(s)} {s}" for s in Status if report.count(s))
    return Text.assemble((f"{report.label}: ", "bold"), verdict, f" ({counts}) in {report.seconds:.1f}s")


def validate(
    targets: Annotated[
        list[str] | None,
        typer.Argument(
            help="Environment folders (images/calendar), names (calendar, calendar:1.0.0) or image references.",
            show_default=False,
        ),
    ] = None,
    all_envs: Annotated[
        bool,
        typer.Option("--all", help="Every environment folder under $ENVREG_IMAGES (default ./images)."),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON on stdout.")] = False,
    junit: Annotated[
        Path | None, typer.Option("--junit", metavar="FILE", help="Also write a JUnit XML report to FILE.")
    ] = None,
    only: Annotated[
        list[str] | None,
        typer.Option(
            "--check", metavar="PATTERN", help="Run only matching checks: a name, a group or a glob."
        ),
    ] = None,
    skip: Annotated[
        list[str] | None,
        typer.Option("--skip", metavar="PATTERN", help="Skip matching checks (reported as skipped)."),
    ] = None,
    jobs: Annotated[int, typer.Option("--jobs", "-j", min=1, help="Images validated at once.")] = 1,
    list_checks: Annotated[bool, typer.Option("--list", help="List the checks and exit.")] = False,
) -> None:
    """Check that environment images are executable, stateful, isolated and deterministic.

    Runs named checks against real, hardened containers of each image (manifest, schemas, scenarios, state, sandbox, budgets) and reports pass / fail / skip with the evidence. Exits 1 when any check fails, 2 on bad usage.
    """
    import anyio

    from envreg.validate import select
    from envreg.validate import validate as run_validation
    from envreg.validate.report import to_json, to_junit

    if list_checks:
        _list_checks()
        return
    if all_envs:
        from envreg.config import images_root
        from envreg.env.loader import known_names

        names = known_names()
        if not names:
            raise fail(f"--all: no environment folders (with an env.py) under {images_root()}/", code=2)
        targets = [*(targets or []), *(str(images_root() / n) for n in names)]
    if not targets:
        raise fail(
            "no environments to validate",
            "give folders, names or image references (`envreg validate calendar`), or --all",
            code=2,
        )
    try:
        checks, _ = select(only or (), skip or ())
    except ValueError as exc:
        raise fail(f"{exc}", code=2) from None

    live = err.is_terminal or _force_progress()
    status = err.status("validating", spinner="dots") if live else None
    done: dict[str, int] = {}

    def listener(report, result) -> None:  # type: ignore[no-untyped-def]
        if result is not None:
            done[report.target] = done.get(report.target, 0) + 1
            if status is not None:
                busy = ", ".join(f"{t.rsplit('/', 1)[-1]} {n}/{len(checks)}" for t, n in done.items())
                status.update(f"validating: {busy}")
            return
        done.pop(report.target, None)
        if not as_json:
            err.print(_footer(report))

    t0 = time.perf_counter()
    try:
        if status is not None:
            status.start()
        reports = anyio.run(
            lambda: run_validation(targets, only=only or (), skip=skip or (), jobs=jobs, listener=listener)
        )
    except Exception as exc:
        from envreg.errors import EnvregError

        if not isinstance(exc, EnvregError):
            raise
        raise fail(f"{exc}", code=1) from None
    finally:
        if status is not None:
            status.stop()
    seconds = time.perf_counter() - t0

    if junit is not None:
        junit.parent.mkdir(parents=True, exist_ok=True)
        junit.write_bytes(to_junit(reports, seconds))
    if as_json:
        out.print_json(json.dumps(to_json(reports, seconds)))
    else:
        for report in reports:
            _render(report)
            out.print()
        failed = [r.label for r in reports if not r.passed]
        line = f"{len(reports)} environment{'s' * (len(reports) != 1)} validated in {seconds:.1f}s"
        if failed:
            out.print(Text.assemble(("FAILED: ", "bold red"), ", ".join(failed), f"  ({line})"))
        else:
            out.print(Text.assemble(("all passed", "bold green"), f"  ({line}, {len(checks)} checks each)"))
        if junit is not None:
            err.print(f"JUnit report: {junit}")
    if not all(r.passed for r in reports):
        raise typer.Exit(1)


def _force_progress() -> bool:
    from envreg.config import force_progress

    return force_progress()


def register(app: typer.Typer) -> None:
    app.command("validate")(validate)
