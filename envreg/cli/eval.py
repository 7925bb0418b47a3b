"""`envreg eval`: measure a model (any OpenAI-compatible endpoint) on the catalog's scenarios or a task file."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

err = Console(emoji=False, stderr=True, highlight=False, soft_wrap=True)
TIERS = ("local", "instance", "container")


def _fail(message: str, hint: str | None = None, code: int = 1) -> typer.Exit:
    err.print(f"[red]error:[/] {escape(message)}")
    if hint:
        err.print(f"[dim]hint:[/] {escape(hint)}")
    return typer.Exit(code)


def evaluate(
    base_url: Annotated[
        str, typer.Option(help="The model's OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1.")
    ],
    model: Annotated[str, typer.Option(help="Model name sent with every request.")],
    env: Annotated[
        list[str] | None, typer.Option("--env", help="Evaluate on this environment's scenarios (repeatable).")
    ] = None,
    all_envs: Annotated[bool, typer.Option("--all", help="Every environment under $ENVREG_IMAGES.")] = False,
    tasks_file: Annotated[
        list[Path] | None,
        typer.Option("--tasks", metavar="FILE", help="Tasks or trajectory records (JSON Lines; repeatable)."),
    ] = None,
    trials: Annotated[
        int, typer.Option("--trials", "-k", min=1, help="Trials per task (pass^k up to k).")
    ] = 1,
    isolation: Annotated[
        str, typer.Option(help="Sandboxes: local (in process), instance or container (Docker).")
    ] = "local",
    concurrency: Annotated[int, typer.Option(min=1, help="Episodes at once.")] = 8,
    out: Annotated[
        Path | None, typer.Option(help="Results folder (resumed when it exists; default evals/<model>).")
    ] = None,
    restart: Annotated[
        bool, typer.Option("--restart", help="Discard the results folder's records first.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON on stdout.")] = False,
    junit: Annotated[
        Path | None, typer.Option("--junit", metavar="FILE", help="Also write JUnit XML.")
    ] = None,
    max_steps: Annotated[int, typer.Option(min=1, help="Assistant messages per user turn.")] = 50,
    max_tokens: Annotated[int | None, typer.Option(min=1, help="Completion tokens per episode.")] = None,
    max_seconds: Annotated[float | None, typer.Option(min=0, help="Model time per episode (s).")] = None,
    temperature: Annotated[
        float | None, typer.Option(help="Sampling temperature (the endpoint's default when unset).")
    ] = None,
    seed: Annotated[int | None, typer.Option(help="Trial t is sent seed + t.")] = None,
    api_key_env: Annotated[
        str, typer.Option(help="Environment variable holding the API key.")
    ] = "OPENAI_API_KEY",
) -> None:
    """Play every task `--trials` times with the model; print pass@1, pass^k and mean reward by environment and domain.

    Results go to the --out folder as they finish (records.jsonl); running again on it plays only what is missing.
    """
    import anyio

    from envreg.errors import EnvregError
    from envreg.rollout import ChatPolicy, EpisodeOptions, Rollouts, read_tasks, scenario_tasks
    from envreg.rollout.evaluate import (
        EvalConfig,
        ResultsFolder,
        summarize,
        tasks_digest,
        to_junit,
        write_summary,
    )
    from envreg.rollout.task import unique_ids

    if isolation not in TIERS:
        raise _fail(f"bad --isolation {isolation!r}", f"one of {', '.join(TIERS)}", 2)
    names = list(env or [])
    if all_envs:
        from envreg.env.loader import known_names

        names += known_names()
    if not names and not tasks_file:
        raise _fail("nothing to evaluate on", "give --env NAME, --all or --tasks FILE", 2)
    try:
        tasks = scenario_tasks(names) + [t for path in tasks_file or [] for t in read_tasks(path)]
        unique_ids(tasks)
    except EnvregError as exc:
        raise _fail(exc.message, exc.hint, 2) from None
    sampling: dict[str, Any] = {} if temperature is None else {"temperature": temperature}
    config = EvalConfig(
        model=model,
        base_url=base_url,
        isolation=isolation,
        trials=trials,
        sampling={**sampling, **({"seed": seed} if seed is not None else {})},
        tasks_sha256=tasks_digest(tasks),
        tasks=len(tasks),
    )
    folder = ResultsFolder(out or Path("evals") / model.replace("/", "_"))
    if restart:
        folder.restart()
    try:
        folder.open(config)
    except EnvregError as exc:
        raise _fail(exc.message, exc.hint) from None
    todo = folder.missing(tasks, trials)
    done_before = trials * len(tasks) - len(todo)
    if done_before:
        err.print(f"resuming {folder.path}: {done_before} of {trials * len(tasks)} episodes already done")

    options = EpisodeOptions(
        isolation=isolation,
        max_steps=max_steps,
        max_tokens=max_tokens,
        max_seconds=max_seconds,
        sampling=sampling,
    )

    def trial_sampling(task, trial: int) -> dict[str, Any]:
        return {"seed": seed + trial} if seed is not None else {}

    async def main() -> float:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        from envreg.config import force_progress

        policy = ChatPolicy(base_url, model, api_key_env=api_key_env)
        pool = {isolation: concurrency} if isolation != "local" else None
        started = time.perf_counter()
        async with Runtime(pool=pool) as rt:
            rollouts = Rollouts(rt, policy, options)
            with Progress(
                TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                console=err, transient=True, disable=not (err.is_terminal or force_progress()),
            ) as progress:  # fmt: skip
                bar = progress.add_task(f"eval {model}", total=len(todo))

                def on_record(record) -> None:
                    folder.add(record)
                    progress.advance(bar)

                try:
                    await rollouts.run(
                        todo, concurrency=concurrency, on_record=on_record, sampling=trial_sampling
                    )
                finally:
                    await rollouts.aclose()
                    await policy.aclose()
        return time.perf_counter() - started

    from envreg.runtime import Runtime

    try:
        seconds = anyio.run(main)
    except EnvregError as exc:
        raise _fail(exc.message, exc.hint) from None
    summary = summarize(tasks, folder.records, config, seconds)
    write_summary(folder.path, summary)
    if junit is not None:
        junit.parent.mkdir(parents=True, exist_ok=True)
        junit.write_bytes(to_junit(summary))
    if as_json:
        sys.stdout.write(json.dumps(summary, indent=1) + "\n")
    else:
        _tables(summary, trials)
    errors = [r for r in folder.records.values() if r.error]
    if errors:
        err.print(
            f"[yellow]{len(errors)} episodes ended in an error[/], e.g.: {escape(errors[0].error or '')}"
        )
    if todo and len(errors) >= len(folder.records):
        raise typer.Exit(1)


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _tables(summary: dict[str, Any], trials: int) -> None:
    out = Console(emoji=False, highlight=False, width=None if sys.stdout.isatty() else 200)
    ks = [f"pass^{k}" for k in range(2, trials + 1)]
    for title, rows in (("environment", summary["environments"]), ("domain", summary["domains"])):
        table = Table(box=None, pad_edge=False, title_justify="left")
        for column in (
            title.upper(),
            "TASKS",
            "EPISODES",
            "PASS@1",
            *(k.upper() for k in ks),
            "MEAN REWARD",
            "ERRORS",
        ):
            table.add_column(column, justify="left" if column == title.upper() else "right")
        for row in [*rows, summary["overall"]]:
            table.add_row(
                row["name"], str(row["tasks"]), str(row["episodes"]), _fmt(row["pass@1"]),
                *(_fmt(row[k]) for k in ks), _fmt(row["mean_reward"]), str(row["errors"]),
            )  # fmt: skip
        out.print(table)
        out.print()
    overall = summary["overall"]
    err.print(
        f"{summary['config']['model']}: pass@1 {_fmt(overall['pass@1'])} over {overall['tasks']} tasks "
        f"x {trials} trials ({summary['config']['isolation']}) in {summary['seconds']:.1f}s"
    )


def register(app: typer.Typer) -> None:
    app.command("eval")(evaluate)
