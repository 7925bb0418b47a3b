"""`envreg reward score` (files of predictions, table or JSON) and `envreg reward serve` (batched HTTP endpoint)."""

from __future__ import annotations

import json
import os
import secrets
import sys
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from envreg.cli import output
from envreg.http.loopback import is_loopback

app = typer.Typer(
    name="reward",
    help="Score model outputs by replaying them in sandboxes against trajectory records.",
    no_args_is_help=True,
)
err = Console(emoji=False, stderr=True, highlight=False, soft_wrap=True)
TIERS = ("local", "instance", "container")

Isolation = Annotated[
    str,
    typer.Option(help="Where predicted calls are replayed: local (trusted, fastest), instance or container."),
]
Alpha = Annotated[float, typer.Option(help="Weight of R_traj (R_state gets 1 - alpha).")]
Gamma = Annotated[float, typer.Option(help="Weight of the length penalty.")]
Beta = Annotated[float, typer.Option(help="Weight of the format penalty (malformed calls).")]
Ordered = Annotated[bool, typer.Option("--ordered", help="Oracle calls must appear in their order.")]
Partial = Annotated[bool, typer.Option("--partial-state", help="Entity-level partial credit for R_state.")]
CheckAnswer = Annotated[
    bool,
    typer.Option(
        "--check-answer/--no-check-answer",
        help="Read-only turns: the answer must state the facts (off for a policy that never sees results).",
    ),
]
Sources = Annotated[
    list[str] | None,
    typer.Option("--env", help="NAME=FOLDER: where to find an environment the records name (repeatable)."),
]


MAX_BODY = 16 << 20


def fail(message: str, code: int = 1) -> typer.Exit:
    return output.fail(message, code=code)


def _sources(specs: list[str] | None) -> dict[str, str]:
    out = {}
    for spec in specs or []:
        name, sep, folder = spec.partition("=")
        if not sep or not name or not folder:
            raise fail(f"bad --env {spec!r}: write NAME=FOLDER, e.g. counter=tests/fixtures/counter", 2)
        out[name] = folder
    return out


def _check_tier(isolation: str) -> None:
    if isolation not in TIERS:
        raise fail(f"bad --isolation {isolation!r}: one of {', '.join(TIERS)}", 2)


@app.command("score")
def score(
    file: Annotated[
        Path,
        typer.Argument(
            help="JSON Lines or JSON of {record, output} items, or a verl parquet file "
            "(reward_model.ground_truth and a column of responses)."
        ),
    ],
    isolation: Isolation = "local",
    alpha: Alpha = 0.5,
    gamma: Gamma = 0.1,
    beta: Beta = 0.1,
    ordered: Ordered = False,
    partial_state: Partial = False,
    check_answer: CheckAnswer = True,
    oracle: Annotated[
        bool, typer.Option("--oracle", help="Score each record's own calls (a check of the records).")
    ] = False,
    response_key: Annotated[str, typer.Option(help="Parquet column holding model outputs.")] = "responses",
    concurrency: Annotated[int, typer.Option(min=1, help="Evaluations at once (Docker tiers).")] = 8,
    env: Sources = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON result per item instead of a table.")
    ] = False,
) -> None:
    """Score every item of FILE; print a table (or JSON) with each reward and its components."""
    import anyio

    from envreg.reward.batch import ItemResult, read_items, score_items
    from envreg.reward.score import ScoreOptions, Scorer
    from envreg.runtime import EngineError, Runtime

    _check_tier(isolation)
    sources = _sources(env)
    try:
        items = read_items(file, response_key, oracle)
    except ValueError as exc:
        raise fail(str(exc), 2) from None
    if not items:
        raise fail(f"{file} holds no items", 2)
    options = ScoreOptions(
        alpha=alpha,
        gamma=gamma,
        beta=beta,
        ordered=ordered,
        partial_state=partial_state,
        check_answer=check_answer,
    )

    async def main() -> tuple[list[ItemResult], float]:
        async with Runtime(pool={isolation: concurrency} if isolation != "local" else None) as rt:
            scorer = Scorer(rt, isolation=isolation, options=options, sources=sources)
            with Progress(
                TextColumn("scoring"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                console=err, transient=True, disable=not err.is_terminal,
            ) as progress:  # fmt: skip
                task = progress.add_task("score", total=len(items))
                started = time.perf_counter()
                results = await score_items(
                    scorer, items, anyio.CapacityLimiter(concurrency), oracle=oracle,
                    on_done=lambda _: progress.advance(task),
                )  # fmt: skip
                elapsed = time.perf_counter() - started
            await scorer.close()
            return results, elapsed

    try:
        results, elapsed = anyio.run(main)
    except EngineError as exc:
        raise fail(str(exc)) from None
    failed = [r for r in results if r.error]
    if as_json:
        for r in results:
            sys.stdout.write(json.dumps(r.model_dump(mode="json", exclude_none=True)) + "\n")
    else:
        _table(results)
    scored = [r.result for r in results if r.result]
    if scored:
        mean = sum(r.reward for r in scored) / len(scored)
        err.print(
            f"{len(scored)} scored, {len(failed)} failed · mean reward {mean:.4f} · "
            f"{len(scored) / elapsed:,.0f} evaluations/s ({isolation})"
        )
    for r in failed:
        err.print(f"[red]error:[/] item {r.index}: {r.error}")
    if failed:
        raise output.fail(
            f"{len(failed)} of {len(results)} items could not be scored", "each item's error is above"
        )


def _table(results) -> None:
    out = Console(emoji=False, highlight=False, width=None if sys.stdout.isatty() else 200)
    table = Table(box=None, pad_edge=False)
    for column in ("#", "ID", "REWARD", "GATE", "R_TRAJ", "R_STATE", "R_RESP", "R_ANS", "P_LEN", "P_FMT",
                   "CALLS", "MATCHED", "UNKNOWN", "BAD ARGS", "ERRORS", "MALFORMED"):  # fmt: skip
        table.add_column(column, justify="left" if column in ("ID", "GATE") else "right")
    for r in results:
        b = r.result
        if b is None:
            table.add_row(str(r.index), "[red]error[/]", *[""] * 14)
            continue
        table.add_row(
            str(r.index), b.id or "-", f"{b.reward:.3f}", b.gate or "-", f"{b.r_traj:.3f}", f"{b.r_state:.3f}",
            f"{b.r_response:.3f}", f"{b.r_answer:.3f}", f"{b.p_length:.3f}", f"{b.p_format:.3f}",
            str(b.predicted_calls), f"{b.matched_calls}/{b.expected_calls}", str(b.unknown_tools),
            str(b.bad_arguments), str(b.tool_errors + b.injected_errors), str(b.malformed),
        )  # fmt: skip
    out.print(table)


@app.command("serve")
def serve(
    host: Annotated[str, typer.Option(help="Address to bind (loopback unless you mean it).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port (0: any free one).")] = 7071,
    token_file: Annotated[
        Path | None,
        typer.Option(
            help="File holding the bearer token clients must send (one is written there, mode 600, when it "
            "does not exist). Default: $ENVREG_REWARD_TOKEN, else a new token in $ENVREG_HOME/reward-token."
        ),
    ] = None,
    max_body: Annotated[
        int, typer.Option(min=1, help="Largest request body in bytes (413 beyond).")
    ] = MAX_BODY,
    isolation: Isolation = "local",
    concurrency: Annotated[int, typer.Option(min=1, help="Evaluations at once, across all requests.")] = 16,
    max_batch: Annotated[int, typer.Option(min=1, help="Most items in one request (413 beyond).")] = 1024,
    pool: Annotated[int, typer.Option(min=0, help="Warm sandboxes kept ready (Docker tiers).")] = 16,
    alpha: Alpha = 0.5,
    gamma: Gamma = 0.1,
    beta: Beta = 0.1,
    ordered: Ordered = False,
    partial_state: Partial = False,
    check_answer: CheckAnswer = True,
    env: Sources = None,
) -> None:
    """Serve POST /v1/score (batched, OpenAPI at /openapi.json) until Ctrl-C."""
    import anyio

    from envreg.config import reward_token
    from envreg.http.serving import SignalStop
    from envreg.reward.score import ScoreOptions
    from envreg.reward.server import RewardServerConfig
    from envreg.reward.server import serve as serve_app
    from envreg.server.listen import LISTEN_EXIT, ONE_PORT_HINT, CannotListen

    _check_tier(isolation)
    token, where = _token(token_file, reward_token())
    config = RewardServerConfig(
        token=token,
        max_body=max_body,
        isolation=isolation,
        concurrency=concurrency,
        max_batch=max_batch,
        pool={isolation: pool} if isolation != "local" else {},
        options=ScoreOptions(
            alpha=alpha,
            gamma=gamma,
            beta=beta,
            ordered=ordered,
            partial_state=partial_state,
            check_answer=check_answer,
        ),
        sources=_sources(env),
    )
    if not is_loopback(host):
        err.print(f"[yellow]warning:[/] serving on {host}: reachable beyond this machine's loopback")

    def ready(url: str) -> None:
        err.print(f"envreg reward serve: {url} · {isolation} tier · {concurrency} at once")
        err.print(f"POST {url}/v1/score  (Authorization: Bearer <the token {where}>)", markup=False)

    try:
        with SignalStop() as stop:  # SIGINT / SIGTERM stop the server, then end the process as they end it
            anyio.run(serve_app, config, host, port, ready, stop)
    except CannotListen as exc:
        raise output.fail(exc.message, ONE_PORT_HINT, LISTEN_EXIT) from None
    except KeyboardInterrupt:
        pass


def _token(token_file: Path | None, from_environment: str | None) -> tuple[str, str]:
    """The server's bearer token and where a client finds it: $ENVREG_REWARD_TOKEN, else `token_file`
    (written with a new token when it does not exist), else a new token in $ENVREG_HOME/reward-token.
    The token itself is never on the command line nor printed."""
    from envreg.config import envreg_home

    if from_environment and token_file is None:
        return from_environment, "in $ENVREG_REWARD_TOKEN"
    path = token_file or envreg_home() / "reward-token"
    if token_file is not None and path.is_file():
        token = path.read_text().strip()
        if not token:
            raise fail(f"--token-file {path} is empty: write a token in it, or remove it for a new one", 2)
        return token, f"in {path}"
    token = secrets.token_urlsafe(32)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(token + "\n")
    except OSError as exc:
        raise fail(f"cannot write the token file {path}: {exc.strerror}", 2) from None
    return token, f"in {path}"


def register(root: typer.Typer) -> None:
    root.add_typer(app)
