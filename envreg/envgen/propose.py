"""Coverage gaps: what the catalog lacks, and metadata files for `envreg envgen` that fill them.

`catalog_gaps` reads the committed manifests (and, when given, the tool graph of `envreg synth graph`):
domains with a single environment, environments whose entities lack an operation (a create without a
delete, nothing that reads), id inputs no tool of the catalog hands out, and from the graph the
environments whose tools chain with no other environment's and the required inputs nothing can fill.
`propose` shows that to an OpenAI-compatible model and keeps the proposals that are valid EnvFactory
metadata for names the catalog does not have.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from envreg.catalog import summary_line
from envreg.envgen.prompts import PROPOSE_SYSTEM, propose_prompt
from envreg.envgen.spec import Spec, SpecProblem, from_metadata, tool_verb
from envreg.errors import Conflict
from envreg.manifest import Manifest
from envreg.synth.llm import LLMConfig, chat_json

OPERATIONS = ("create", "read", "update", "delete")


def catalog_summary(manifests: list[Manifest]) -> dict[str, Any]:
    """Domains and their environments, and each environment's summary and tool names (what the model is shown)."""
    domains: dict[str, list[str]] = defaultdict(list)
    for m in manifests:
        domains[m.domain].append(m.name)
    return {
        "domains": {d: sorted(names) for d, names in sorted(domains.items())},
        "environments": {
            m.name: {
                "domain": m.domain,
                "summary": summary_line(m.description),
                "tools": [t.name for t in m.tools],
            }
            for m in sorted(manifests, key=lambda m: m.name)
        },
    }


def _unproduced_ids(manifest: Manifest) -> list[dict[str, str]]:
    """Required id inputs of `manifest`'s tools that none of its tools returns (by prefix, or by name)."""
    from envreg.synth.params import classify, id_prefix, input_params, is_id, output_params

    wires = [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in manifest.tools]
    outs = [p for w in wires for p in output_params(manifest.name, w) if is_id(p)]
    prefixes = {id_prefix(p) for p in outs} - {None}
    names = {p.name for p in outs} | {
        f"{p.tool.split('_', 1)[-1].rstrip('s')}_id" for p in outs if p.name == "id"
    }
    missing = []
    for wire in wires:
        for p in input_params(manifest.name, wire):
            if not p.required or classify(p) != "id":
                continue
            prefix = id_prefix(p)
            if (prefix and prefix in prefixes) or p.name in names:
                continue
            missing.append(
                {"environment": manifest.name, "tool": p.tool, "parameter": p.name, "prefix": prefix or ""}
            )
    return missing


def catalog_gaps(manifests: list[Manifest], graph: Any = None) -> dict[str, Any]:
    """Where the catalog is thin (see the module docstring); `graph` is an `envreg.synth.graph.ToolGraph`."""
    domains: dict[str, list[str]] = defaultdict(list)
    for m in manifests:
        domains[m.domain].append(m.name)
    operations = {}
    for m in manifests:
        have = {tool_verb(t.name) for t in m.tools}
        lacking = [op for op in OPERATIONS if op not in have]
        if lacking:
            operations[m.name] = lacking
    gaps: dict[str, Any] = {
        "thin_domains": sorted(d for d, names in domains.items() if len(names) == 1),
        "missing_operations": operations,
        "unproduced_ids": [row for m in manifests for row in _unproduced_ids(m)],
    }
    if graph is not None:
        rows = graph.per_env_stats()
        gaps["isolated_environments"] = sorted(r["env"] for r in rows if not r["tool_edges_out"])
        g = graph.graph
        gaps["unsatisfiable_inputs"] = sorted(
            n
            for n, d in g.nodes(data=True)
            if d["node"] == "param"
            and d["direction"] == "in"
            and d["required"]
            and not d["user_providable"]
            and not graph.feeders(n)
        )
    return gaps


def check_proposal(value: Any, taken: set[str]) -> Spec:
    """One proposal as a spec; `SpecProblem` when it is not metadata, or names an environment already there."""
    if not isinstance(value, dict):
        raise SpecProblem("a proposal must be a JSON object of EnvFactory metadata")
    spec = from_metadata(value)
    if spec.name in taken:
        raise SpecProblem(
            f"{spec.name!r} is already in the catalog (or proposed twice): propose something else"
        )
    if len(spec.tools) < 3:
        raise SpecProblem(f"{spec.name}: {len(spec.tools)} tools; propose at least 3")
    return spec


async def propose(
    llm: LLMConfig, manifests: list[Manifest], count: int, graph: Any = None
) -> tuple[list[tuple[Spec, str]], dict[str, Any]]:
    """Ask the model for `count` new environments; returns the valid proposals (spec, rationale) and the gaps."""
    catalog = catalog_summary(manifests)
    gaps = catalog_gaps(manifests, graph)
    taken = {m.name for m in manifests}

    def check(answer: Any) -> None:
        items = answer.get("proposals") if isinstance(answer, dict) else None
        if not isinstance(items, list) or not items:
            raise ValueError('answer with {"proposals": [ ... ]}')
        seen = set(taken)
        for item in items:
            try:
                seen.add(check_proposal(item, seen).name)
            except SpecProblem as exc:
                raise ValueError(exc.message) from None

    answer = await chat_json(llm, PROPOSE_SYSTEM, propose_prompt(catalog, gaps, count), check=check)
    if answer is None:
        raise SpecProblem(
            f"the model gave no usable proposals after {llm.attempts} attempts",
            "check that it answers JSON ({'proposals': [...]}), or write metadata files yourself",
        )
    out, seen = [], set(taken)
    for item in answer["proposals"][:count]:
        spec = check_proposal(item, seen)
        seen.add(spec.name)
        out.append((spec, str(item.get("rationale") or "")))
    return out, gaps


def write_proposals(folder: Path, proposals: list[tuple[Spec, str]], *, force: bool = False) -> list[Path]:
    """Write each proposal as ``<folder>/<name>.json`` (EnvFactory metadata with its domain and rationale); refuse,
    writing nothing, when one exists and not `force`."""
    paths = [
        folder / f"{spec.name}.json" for spec, _ in proposals
    ]  # names are checked: never outside `folder`
    existing = [p for p in paths if p.exists()]
    if existing and not force:
        raise Conflict(
            f"{', '.join(map(str, existing))} exists", "pass --force to replace, or choose another --out"
        )
    folder.mkdir(parents=True, exist_ok=True)
    for path, (spec, rationale) in zip(paths, proposals, strict=True):
        path.write_text(
            json.dumps({**spec.metadata(), "rationale": rationale}, indent=2, ensure_ascii=False) + "\n"
        )
    return paths
