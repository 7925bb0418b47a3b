"""`envreg augment`: COVERT's oracle-preserving augmentations applied to trajectory records and scenarios."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from envreg.cli.output import err, fail
from envreg.cli.synth import KeyEnvOpt, LLMUrlOpt, ManifestsOpt, ModelOpt, _llm, _manifests

console = Console(emoji=False, soft_wrap=True)


def _fail(message: str, hint: str | None = None, code: int = 2) -> typer.Exit:
    return fail(message, hint, code)


def augment(
    records: Annotated[
        Path | None, typer.Argument(help="A trajectories.jsonl (from `envreg synth run`) to augment.")
    ] = None,
    scenarios: Annotated[
        list[str] | None,
        typer.Option(
            "--scenarios", help="Also augment this environment's validation scenarios (repeatable)."
        ),
    ] = None,
    family: Annotated[
        list[str] | None,
        typer.Option(
            "--family",
            "-f",
            help="distractors, formats, noise, errors, rewrite, problematic (repeatable; default: the first four, "
            "and the last two with an LLM).",
        ),
    ] = None,
    out: Annotated[Path, typer.Option("--out", "-o", help="Output folder (augmented.jsonl).")] = Path(
        "augmented"
    ),
    seed: Annotated[int, typer.Option(help="Seed of every choice: the same seed, the same variants.")] = 0,
    distractors: Annotated[int, typer.Option(min=1, help="Decoy tools per environment.")] = 3,
    overlap: Annotated[
        str, typer.Option(help="How much decoys look like the real tools: high, medium or low.")
    ] = "medium",
    formats: Annotated[
        str, typer.Option(help="Result formats to draw from (comma-separated).")
    ] = "yaml,xml,markdown",
    noise: Annotated[
        float, typer.Option(min=0, max=1, help="Probability that a result gets noise fields.")
    ] = 1.0,
    errors: Annotated[
        float, typer.Option(min=0, max=1, help="Probability that a call's first attempt fails transiently.")
    ] = 0.5,
    indirection: Annotated[
        int, typer.Option(min=1, max=3, help="rewrite: 1 paraphrase, 2 refer to earlier results, 3 the goal.")
    ] = 1,
    embed: Annotated[
        str, typer.Option(help="Decoy similarity: graph (the synth graph's embeddings) or tfidf.")
    ] = "graph",
    isolation: Annotated[
        str, typer.Option(help="Where variants are verified: local, instance or container.")
    ] = "local",
    manifests: ManifestsOpt = None,
    llm_base_url: LLMUrlOpt = None,
    model: ModelOpt = None,
    api_key_env: KeyEnvOpt = "OPENAI_API_KEY",
) -> None:
    """Augment records and scenarios with COVERT's families; write only the variants that pass verification."""
    import anyio

    from envreg.env.augment import FORMATS
    from envreg.reward.augment import OVERLAPS, load_catalog
    from envreg.runtime import EngineError, Runtime
    from envreg.synth.augment import FAMILIES, NEEDS_LLM, RUNTIME_FAMILIES, AugmentOptions, augment_records
    from envreg.synth.export import ExportError, read_trajectories, write_trajectories
    from envreg.synth.scenarios import scenario_records

    llm = _llm(llm_base_url, model, api_key_env)
    families = family or [*RUNTIME_FAMILIES, *(NEEDS_LLM if llm else ())]
    if unknown := sorted(set(families) - set(FAMILIES)):
        raise _fail(f"unknown --family {', '.join(unknown)}", f"choose from {', '.join(FAMILIES)}")
    if llm is None and (need := [f for f in families if f in NEEDS_LLM]):
        raise _fail(
            f"--family {', '.join(need)} needs an LLM (it writes the requests, and judges problematic ones)",
            "pass --llm-base-url and --model (any OpenAI-compatible endpoint: vLLM, SGLang, ...)",
        )
    chosen = [f.strip() for f in formats.split(",") if f.strip()]
    if not chosen or set(chosen) - set(FORMATS):
        raise _fail(f"bad --formats {formats!r}", f"a comma-separated list of {', '.join(FORMATS)}")
    if overlap not in OVERLAPS:
        raise _fail(f"bad --overlap {overlap!r}", f"one of {', '.join(OVERLAPS)}")
    if embed not in ("graph", "tfidf"):
        raise _fail(f"bad --embed {embed!r}", "graph or tfidf")
    if isolation not in ("local", "instance", "container"):
        raise _fail(f"bad --isolation {isolation!r}", "local, instance or container")
    if records is None and not scenarios:
        raise _fail("nothing to augment", "give a trajectories.jsonl, or --scenarios ENV")
    inputs = []
    try:
        if records is not None:
            inputs += read_trajectories(records)
        for env in scenarios or []:
            inputs += scenario_records(env, seed)
        catalog = load_catalog(_manifests(manifests))
    except (OSError, ExportError, LookupError) as exc:
        raise _fail(str(exc), "check the file and the environment names (`envreg catalog`)", 1) from None
    if "distractors" in families and not catalog:
        raise _fail(
            f"no manifests in {_manifests(manifests)}/ to draw decoys from", "pass --manifests DIR", 1
        )
    options = AugmentOptions(
        seed=seed, distractors=distractors, overlap=overlap, formats=chosen, noise=noise, errors=errors,  # type: ignore[arg-type]
        indirection=indirection, catalog=catalog, embed=embed,  # type: ignore[arg-type]
    )  # fmt: skip

    async def main():
        async with Runtime() as rt:
            return await augment_records(rt, inputs, families, options, llm, isolation)

    started = time.perf_counter()
    try:
        variants = anyio.run(main)
    except EngineError as exc:
        raise _fail(str(exc), "build the images with `envreg build`, or use --isolation local", 1) from None
    kept = [v.record for v in variants if v.record is not None]
    out.mkdir(parents=True, exist_ok=True)
    write_trajectories(out / "augmented.jsonl", kept)
    table = Table(
        title=f"envreg augment · seed {seed} · {len(inputs)} records · {time.perf_counter() - started:.1f}s"
    )
    for column in ("family", "kept", "rejected", "why rejected (most often)"):
        table.add_column(
            column, justify="left" if column in ("family", "why rejected (most often)") else "right"
        )
    for name in families:
        mine = [v for v in variants if v.family == name]
        reasons = Counter(v.reason for v in mine if v.record is None)
        top = "; ".join(f"{r} ({n})" for r, n in reasons.most_common(2))
        table.add_row(name, str(sum(v.record is not None for v in mine)), str(sum(reasons.values())), top)
    console.print(table)
    console.print(f"wrote {len(kept)} verified variants: {out / 'augmented.jsonl'}")
    if not kept:
        err.print("[yellow]warning:[/] no variant passed verification")


def register(root: typer.Typer) -> None:
    root.command("augment")(augment)
