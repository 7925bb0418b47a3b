"""`envreg envgen`: environments written by an LLM from metadata, each revision executed and validated;
`envreg envgen propose`: metadata for what the catalog lacks."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from typer.core import TyperGroup

from envreg.cli.output import err, fail

out = Console(emoji=False, highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 160)


class _GenerateByDefault(TyperGroup):
    """``envreg envgen INPUT ...`` is ``envreg envgen generate INPUT ...``."""

    def parse_args(self, ctx, args):  # type: ignore[no-untyped-def]
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h"):
            args = ["generate", *args]
        return super().parse_args(ctx, args)


app = typer.Typer(
    cls=_GenerateByDefault,
    help="EnvGen: environments from API metadata, every revision built and validated in containers.",
    no_args_is_help=True,
)

LLMUrlOpt = Annotated[
    str | None,
    typer.Option(
        "--llm-base-url", help="OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1 (vLLM, SGLang)."
    ),
]
ModelOpt = Annotated[str | None, typer.Option("--model", help="The model name the endpoint serves.")]
KeyEnvOpt = Annotated[str, typer.Option("--api-key-env", help="Environment variable holding the API key.")]
TemperatureOpt = Annotated[float, typer.Option(help="Sampling temperature.")]


def _llm(base_url: str | None, model: str | None, key_env: str, temperature: float):  # type: ignore[no-untyped-def]
    if not base_url or not model:
        raise fail(
            "envgen needs a model: pass --llm-base-url and --model",
            "any OpenAI-compatible server (vllm serve ..., or the stand-in: python -m envreg.standin --script envgen)",
            2,
        )
    from envreg.synth.llm import LLMConfig

    return LLMConfig(base_url=base_url, model=model, api_key_env=key_env, temperature=temperature)


@app.command("generate")
def generate_cmd(
    source: Annotated[
        Path,
        typer.Argument(
            help="EnvFactory metadata (JSON: class_name, description, tools), an OpenAPI 3 document (JSON), "
            "or a brief (a .txt or .md file)."
        ),
    ],
    llm_base_url: LLMUrlOpt = None,
    model: ModelOpt = None,
    api_key_env: KeyEnvOpt = "OPENAI_API_KEY",
    temperature: TemperatureOpt = 0.2,
    name: Annotated[
        str | None,
        typer.Option(help="Environment name, [a-z0-9][a-z0-9-]* (default: from the class name or title)."),
    ] = None,
    domain: Annotated[
        str | None, typer.Option(help="Environment domain (default: the input's, else general).")
    ] = None,
    out_dir: Annotated[
        Path | None,
        typer.Option(
            "--out", help="Output folder: nothing is written outside it (default: ./envgen/<name>)."
        ),
    ] = None,
    revisions: Annotated[int, typer.Option(min=1, max=50, help="Revision budget (drafts asked for).")] = 5,
    call_timeout: Annotated[
        float, typer.Option("--call-timeout", help="Seconds a tool call (or the module's import) may take.")
    ] = 10.0,
    timeout: Annotated[float, typer.Option(help="Seconds a revision's sandbox inspection may take.")] = 300.0,
    force: Annotated[bool, typer.Option("--force", help="Replace an earlier run's files in --out.")] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the run's log (envgen.json) as JSON.")
    ] = False,
) -> None:
    """Write an environment from SOURCE with an LLM, execute every revision in container sandboxes (import,
    scenarios recorded, image built, envreg validate), and send the failures back until one passes.

    Writes OUT/<name>/ (the environment folder), OUT/manifests/<name>.json, OUT/revisions/NN/ (each revision's
    files, report.json, validate.json) and OUT/envgen.json; the image is <prefix><name>:<version>. Exit 1 when
    no revision passed within the budget."""
    import anyio

    from envreg.envgen.loop import Options, generate, prepare_output, write_metadata
    from envreg.envgen.spec import Brief, read_input
    from envreg.errors import EnvregError

    if not source.is_file():
        raise fail(f"{source} is not a file", code=2)
    llm = _llm(llm_base_url, model, api_key_env, temperature)
    try:
        spec = read_input(source, name=name, domain=domain)
        folder = out_dir or Path("envgen") / (spec.name or "brief")
        if isinstance(spec, Brief):
            with err.status(f"asking {llm.model} for the metadata of the brief"):
                spec = anyio.run(lambda: write_metadata(llm, spec, domain=domain))  # type: ignore[arg-type]
            folder = out_dir or Path("envgen") / spec.name
            prepare_output(folder, spec.name, force=force)
            (folder / "metadata.json").write_text(
                json.dumps(spec.metadata(), indent=2, ensure_ascii=False) + "\n"
            )
        else:
            prepare_output(folder, spec.name, force=force)
    except EnvregError as exc:
        raise fail(exc.message, exc.hint, 2 if exc.status == 400 else 1) from None
    for note in spec.notes:
        err.print(f"[yellow]note:[/] {escape(note)}")
    options = Options(out=folder, revisions=revisions, call_timeout=call_timeout, sandbox_timeout=timeout)
    result = anyio.run(
        lambda: generate(spec, llm, options, lambda line: err.print(f"[dim]{escape(line)}[/]"))
    )
    log = result.to_json()
    if as_json:
        sys.stdout.write(json.dumps(log, indent=2, ensure_ascii=False) + "\n")
    else:
        _print_run(log, folder)
    if not result.passed:
        raise fail(
            f"{spec.name}: no revision passed within {revisions}",
            f"read {folder}/revisions/*/report.json; raise --revisions, or fix {folder}/{spec.name}/ by hand "
            f"(envreg scenario record, envreg build, envreg validate)",
        )


def _print_run(log: dict, folder: Path) -> None:  # type: ignore[type-arg]
    table = Table(title=f"envgen {log['name']}: revisions", title_justify="left")
    for col in (
        "revision",
        "result",
        "failed checks",
        "llm s",
        "inspect s",
        "build s",
        "validate s",
        "total s",
    ):
        table.add_column(col, justify="right" if col.endswith(" s") or col == "revision" else "left")
    for r in log["revisions"]:
        s = r["seconds"]
        table.add_row(
            str(r["revision"]),
            "[green]pass[/]" if r["passed"] else f"[red]{len(r['failures'])} failures[/]",
            ", ".join(r["failed_checks"]) or "-",
            *(f"{s[k]:.1f}" if k in s else "-" for k in ("llm", "inspect", "build", "validate", "total")),
        )
    out.print(table)
    used = log["revisions_used"]
    mean = log["seconds"] / used if used else 0.0
    verdict = "[green]passed[/]" if log["passed"] else "[red]did not pass[/]"
    out.print(
        f"{log['name']}: {verdict} after {used} revision(s), {log['seconds']:.1f} s ({mean:.1f} s per revision); "
        f"LLM requests {log['llm'].get('requests', 0)}, malformed answers {log['llm'].get('malformed_json', 0)}"
    )
    if log["folder"]:
        image = (log["image_id"] or "").removeprefix("sha256:")[:12]
        out.print(
            f"  folder {escape(log['folder'])}/  image {image}  log {escape(str(folder / 'envgen.json'))}"
        )


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="envgen")


@app.command("propose")
def propose_cmd(
    llm_base_url: LLMUrlOpt = None,
    model: ModelOpt = None,
    api_key_env: KeyEnvOpt = "OPENAI_API_KEY",
    temperature: TemperatureOpt = 0.7,
    manifests: Annotated[Path, typer.Option(help="The catalog's manifests folder.")] = Path("manifests"),
    graph: Annotated[
        Path | None, typer.Option(help="The tool graph (`envreg synth graph` output) for the chaining gaps.")
    ] = None,
    count: Annotated[
        int, typer.Option("-n", "--count", min=1, max=20, help="How many environments to propose.")
    ] = 3,
    out_dir: Annotated[Path, typer.Option("--out", help="Folder for the metadata files.")] = Path(
        "proposals"
    ),
    force: Annotated[bool, typer.Option("--force", help="Replace metadata files of the same names.")] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the gaps and the proposals as JSON.")
    ] = False,
) -> None:
    """Read the catalog (domains, tools, the tool graph) and propose the environments it lacks, written as
    EnvFactory metadata files ready for `envreg envgen FILE`. Without a model: print the gaps only."""
    import anyio

    from envreg.envgen.propose import catalog_gaps, propose, write_proposals
    from envreg.errors import EnvregError
    from envreg.synth.graph import ToolGraph, load_manifests

    try:
        loaded = load_manifests(manifests)
        tool_graph = ToolGraph.load(graph) if graph else None
    except (FileNotFoundError, ValueError, OSError) as exc:
        raise fail(
            str(exc), "point --manifests at the catalog's manifests/ (and --graph at a tool graph)", 2
        ) from None
    if not llm_base_url:
        gaps = catalog_gaps(loaded, tool_graph)
        if as_json:
            sys.stdout.write(json.dumps({"gaps": gaps, "proposals": []}, indent=2) + "\n")
            return
        _print_gaps(gaps, len(loaded))
        err.print("[dim]hint:[/] give --llm-base-url and --model to write metadata files for these gaps")
        return
    llm = _llm(llm_base_url, model, api_key_env, temperature)
    try:
        with err.status(f"asking {llm.model} for {count} proposals"):
            proposals, gaps = anyio.run(lambda: propose(llm, loaded, count, tool_graph))
        paths = write_proposals(out_dir, proposals, force=force)
    except EnvregError as exc:
        raise fail(exc.message, exc.hint) from None
    if as_json:
        rows = [
            {"name": s.name, "domain": s.domain, "tools": len(s.tools), "rationale": r, "path": str(p)}
            for (s, r), p in zip(proposals, paths, strict=True)
        ]
        sys.stdout.write(json.dumps({"gaps": gaps, "proposals": rows}, indent=2) + "\n")
        return
    _print_gaps(gaps, len(loaded))
    table = Table(title="proposals", title_justify="left")
    for col in ("name", "domain", "tools", "rationale", "file"):
        table.add_column(col, justify="right" if col == "tools" else "left")
    for (spec, rationale), path in zip(proposals, paths, strict=True):
        table.add_row(spec.name, spec.domain, str(len(spec.tools)), escape(rationale), escape(str(path)))
    out.print(table)
    out.print(
        f"next: `envreg envgen {escape(str(paths[0]))} --llm-base-url ... --model ...`" if paths else ""
    )


def _print_gaps(gaps: dict, environments: int) -> None:  # type: ignore[type-arg]
    out.print(f"[bold]gaps in the catalog[/] ({environments} environments)")
    out.print(f"  domains with one environment: {', '.join(gaps['thin_domains']) or 'none'}")
    for env, ops in sorted(gaps["missing_operations"].items()):
        out.print(f"  {env}: no {'/'.join(ops)} tool")
    for row in gaps["unproduced_ids"]:
        out.print(f"  {row['environment']}/{row['tool']}: needs {row['parameter']}, which no tool returns")
    if "isolated_environments" in gaps:
        out.print(
            f"  environments no other chains into: {', '.join(gaps['isolated_environments']) or 'none'}"
        )
        out.print(f"  required inputs nothing can fill: {len(gaps['unsatisfiable_inputs'])}")
