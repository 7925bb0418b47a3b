"""The tool dependency graph: which tool outputs can feed which tool inputs, across the catalog.

Nodes are tools and their (one level flattened) parameters; an edge ``output -> input`` exists
when the two are type-compatible and their similarity is above the threshold (0.85 by default):

    similarity = 0.6 * cos(name/type embeddings) + 0.4 * cos(description embeddings)

Across environments only parameters of the same shared value kind link (an email, a city, a
ticker... `envreg.synth.params.value_kind`), and for them the threshold is `CROSS_THRESHOLD` (0.7):
the kind says that the values mean the same thing, the similarity that the two parameters are about
it. Edge quality is measured against a labelled set of cross-environment edges (tests).

A tool-to-tool edge summarises the parameter edges between two tools. Inputs are marked
user-providable by the rules of `envreg.synth.params` (or by an LLM when one is configured), and an
LLM can refine the edges. The graph is saved as JSON (networkx node-link data) with a digest: the
same manifests and the same model give the same graph, byte for byte.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envreg.canonical import canonical_json, digest
from envreg.manifest import Manifest

if TYPE_CHECKING:
    import networkx as nx
    import numpy as np

from envreg.synth.params import (
    Param,
    classify,
    id_prefix,
    input_params,
    is_id,
    kind_linkable,
    linkable,
    masked,
    output_params,
    value_kind,
)

GRAPH_FORMAT = "envreg.tool-graph"
GRAPH_VERSION = 2  # 2: value kinds, typed links across environments
THRESHOLD = 0.85
CROSS_THRESHOLD = 0.7
NAME_WEIGHT, DESCRIPTION_WEIGHT = 0.6, 0.4
REFINE_FLOOR = 0.7


def load_manifests(folder: Path | str = "manifests", names: Iterable[str] | None = None) -> list[Manifest]:
    """Every ``*.json`` manifest in `folder` (or only `names`), sorted by name, digests verified."""
    folder = Path(folder)
    paths = sorted(folder.glob("*.json"))
    if not paths:
        raise FileNotFoundError(
            f"no manifests in {folder}/: run `envreg manifest` first, or pass --manifests DIR"
        )
    manifests = []
    wanted = set(names or [])
    for path in paths:
        manifest = Manifest.loads(path.read_text())
        manifest.verify()
        if not wanted or manifest.name in wanted:
            manifests.append(manifest)
    missing = wanted - {m.name for m in manifests}
    if missing:
        raise FileNotFoundError(f"no manifest for {', '.join(sorted(missing))} in {folder}/")
    return manifests


def tool_id(env: str, tool: str) -> str:
    return f"{env}/{tool}"


def compatible(out: Param, inp: Param) -> bool:
    """Hard rules an edge must pass whatever the similarity: types, id-ness (ids stay within their
    environment), id prefixes, enums, and across environments the same shared value kind."""
    out_type, in_type = out.type, inp.type
    if not (out_type == in_type or (out_type == "integer" and in_type == "number")):
        return False
    if is_id(out) != (classify(inp) == "id"):
        return False
    if is_id(out) and out.env != inp.env:
        return False  # an id is a handle into one environment's state: meaningless in another
    if out.env != inp.env and not linkable(out, inp):
        return False
    a, b = id_prefix(out), id_prefix(inp)
    if a and b and a != b:
        return False
    if (
        "enum" in out.schema
        and "enum" in inp.schema
        and not set(out.schema["enum"]) & set(inp.schema["enum"])
    ):
        return False
    return out.tool != inp.tool or out.env != inp.env


@dataclass
class ToolGraph:
    """A networkx DiGraph of tools and parameters, with the facts that produced it."""

    graph: nx.DiGraph
    meta: dict[str, Any]
    timings: dict[str, float] = field(default_factory=dict, compare=False)  # seconds per build stage

    # queries -----------------------------------------------------------------------------------
    def tools(self, envs: Iterable[str] | None = None) -> list[str]:
        wanted = set(envs) if envs is not None else None
        return sorted(
            n
            for n, d in self.graph.nodes(data=True)
            if d["node"] == "tool" and (wanted is None or d["env"] in wanted)
        )

    def envs(self) -> list[str]:
        return sorted({d["env"] for _, d in self.graph.nodes(data=True) if d["node"] == "tool"})

    def node(self, key: str) -> dict[str, Any]:
        return self.graph.nodes[key]

    def inputs(self, tool: str) -> list[str]:
        """The tool's input parameter nodes, in schema order."""
        return sorted(
            (p for p in self.graph.predecessors(tool) if self.graph.nodes[p]["node"] == "param"),
            key=lambda p: self.graph.nodes[p]["order"],
        )

    def outputs(self, tool: str) -> list[str]:
        return sorted(s for s in self.graph.successors(tool) if self.graph.nodes[s]["node"] == "param")

    def feeders(self, param_in: str) -> list[str]:
        """Output parameters with an edge into `param_in`, most similar first."""
        edges = [
            (u, d.get("similarity", 0.0))
            for u, _, d in self.graph.in_edges(param_in, data=True)
            if d["rel"] == "feeds"
        ]
        return [u for u, _ in sorted(edges, key=lambda e: (-e[1], e[0]))]

    def producers(self, param_in: str) -> list[str]:
        """Tools whose outputs can feed `param_in` (sorted)."""
        return sorted({self.graph.nodes[u]["tool_id"] for u in self.feeders(param_in)})

    def successors(self, tool: str) -> list[str]:
        return sorted(v for v in self.graph.successors(tool) if self.graph.nodes[v]["node"] == "tool")

    def env_of(self, tool: str) -> str:
        return self.graph.nodes[tool]["env"]

    # persistence -------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        import networkx as nx

        data = nx.node_link_data(self.graph, edges="links")
        data["nodes"] = sorted(data["nodes"], key=lambda n: n["id"])
        data["links"] = sorted(data["links"], key=lambda e: (e["source"], e["target"]))
        body = {"format": GRAPH_FORMAT, "version": GRAPH_VERSION, "meta": self.meta, "graph": data}
        return {**body, "digest": digest(body)}

    @property
    def digest(self) -> str:
        return self.to_json()["digest"]

    def save(self, path: Path | str) -> str:
        data = self.to_json()
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(data, indent=1, ensure_ascii=False, sort_keys=True) + "\n")
        return data["digest"]

    @classmethod
    def load(cls, path: Path | str) -> ToolGraph:
        data = json.loads(Path(path).read_text())
        if data.get("format") != GRAPH_FORMAT:
            raise ValueError(
                f"{path} is not a tool graph (format {data.get('format')!r}): build one with `envreg synth graph`"
            )
        body = {k: v for k, v in data.items() if k != "digest"}
        if digest(body) != data.get("digest"):
            raise ValueError(
                f"{path}: its digest does not match its content; rebuild it with `envreg synth graph`"
            )
        import networkx as nx

        return cls(nx.node_link_graph(data["graph"], edges="links"), data["meta"])

    # statistics --------------------------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        g = self.graph
        feeds = [(u, v) for u, v, d in g.edges(data=True) if d["rel"] == "feeds"]
        cross = sum(1 for u, v in feeds if g.nodes[u]["env"] != g.nodes[v]["env"])
        chain_edges = [(u, v) for u, v, d in g.edges(data=True) if d["rel"] == "chain"]
        inputs = [n for n, d in g.nodes(data=True) if d["node"] == "param" and d["direction"] == "in"]
        orphans = [
            n
            for n in inputs
            if g.nodes[n]["required"] and not g.nodes[n]["user_providable"] and not self.feeders(n)
        ]
        return {
            "environments": len(self.envs()),
            "tools": len(self.tools()),
            "inputs": len(inputs),
            "user_providable_inputs": sum(1 for n in inputs if g.nodes[n]["user_providable"]),
            "outputs": sum(
                1 for _, d in g.nodes(data=True) if d["node"] == "param" and d["direction"] == "out"
            ),
            "parameter_edges": len(feeds),
            "cross_environment_parameter_edges": cross,
            "tool_edges": len(chain_edges),
            "cross_environment_tool_edges": sum(
                1 for u, v in chain_edges if g.nodes[u]["env"] != g.nodes[v]["env"]
            ),
            "unsatisfiable_required_inputs": len(orphans),
            "digest": self.digest,
        }

    def per_env_stats(self) -> list[dict[str, Any]]:
        g = self.graph
        rows = []
        for env in self.envs():
            tools = self.tools([env])
            ins = [p for t in tools for p in self.inputs(t)]
            out_edges = Counter(
                "cross" if g.nodes[v]["env"] != env else "within" for t in tools for v in self.successors(t)
            )
            rows.append(
                {
                    "env": env,
                    "domain": g.nodes[tools[0]]["domain"] if tools else "",
                    "tools": len(tools),
                    "inputs": len(ins),
                    "user_providable": sum(1 for p in ins if g.nodes[p]["user_providable"]),
                    "tool_edges_within": out_edges["within"],
                    "tool_edges_out": out_edges["cross"],
                }
            )
        return rows


def _param_attrs(param: Param, order: int) -> dict[str, Any]:
    return {
        "node": "param",
        "env": param.env,
        "tool": param.tool,
        "tool_id": tool_id(param.env, param.tool),
        "direction": param.direction,
        "path": list(param.path),
        "name": param.name,
        "type": param.type,
        "kind": classify(param),
        "value_kind": value_kind(param),
        "required": param.required,
        "user_providable": param.user_providable if param.direction == "in" else False,
        "user_providable_by": "rules",
        "masked": masked(param) if param.direction == "in" else False,
        "id_prefix": id_prefix(param),
        "schema": param.schema,
        "description": param.description,
        "in_list": param.in_list,
        "order": order,
    }


def _cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return a @ b.T


def similarity_matrix(
    outs: Sequence[Param],
    ins: Sequence[Param],
    embedder,
    progress: Callable[[int, int], None] | None = None,
    floors: np.ndarray | None = None,
) -> np.ndarray:
    """``0.6 * cos(name) + 0.4 * cos(description)`` for every (output, input) pair, rounded to 4 places.

    With `floors` (one per pair; ``inf`` for a pair that can never be an edge) the descriptions are
    embedded only for the parameters of pairs whose name half can still reach their floor (a cosine
    is at most 1, so ``similarity <= 0.6 * cos(name) + 0.4``); every other pair is -1. Pairs that can
    reach their floor get exactly the similarity they would get without it.
    """
    import numpy as np  # the synth extra: only where a graph is built

    if not outs or not ins:
        return np.zeros((len(outs), len(ins)))

    def encode(texts: list[str]) -> np.ndarray:
        return embedder.encode(texts, progress=progress) if progress else embedder.encode(texts)

    names = encode([p.name_text() for p in (*outs, *ins)])
    name_sim = _cosine(names[: len(outs)], names[len(outs) :]).astype(np.float64)
    if floors is None:
        reach = np.ones(name_sim.shape, dtype=bool)
    else:
        reach = NAME_WEIGHT * name_sim + DESCRIPTION_WEIGHT >= floors - 1e-6
    rows, columns = np.flatnonzero(reach.any(axis=1)), np.flatnonzero(reach.any(axis=0))
    described = encode(
        [outs[i].description_text() for i in rows] + [ins[j].description_text() for j in columns]
    )
    sim = np.full(name_sim.shape, -1.0)
    if len(rows) and len(columns):
        block = np.ix_(rows, columns)
        sim[block] = NAME_WEIGHT * name_sim[block] + DESCRIPTION_WEIGHT * _cosine(
            described[: len(rows)], described[len(rows) :]
        ).astype(np.float64)
    sim[~reach] = -1.0
    return np.round(sim, 4)


def pair_floors(outs: Sequence[Param], ins: Sequence[Param], within: float, across: float) -> np.ndarray:
    """Per (output, input) pair, the similarity it must reach to be an edge; ``inf`` where the hard rules
    of `compatible` already rule it out (types, id-ness, ids across environments, value kinds)."""
    import numpy as np  # the synth extra: only where a graph is built

    out_env, in_env = np.array([p.env for p in outs]), np.array([p.env for p in ins])
    same = out_env[:, None] == in_env[None, :]
    out_type, in_type = np.array([p.type for p in outs]), np.array([p.type for p in ins])
    types = (out_type[:, None] == in_type[None, :]) | (
        (out_type == "integer")[:, None] & (in_type == "number")[None, :]
    )
    out_id, in_id = np.array([is_id(p) for p in outs]), np.array([classify(p) == "id" for p in ins])
    ids = out_id[:, None] == in_id[None, :]
    kinds = sorted({value_kind(p) for p in (*outs, *ins)})
    index = {k: n for n, k in enumerate(kinds)}
    links = np.array([[kind_linkable(a, b) for b in kinds] for a in kinds], dtype=bool)
    out_kind = np.array([index[value_kind(p)] for p in outs])
    in_kind = np.array([index[value_kind(p)] for p in ins])
    across_ok = links[out_kind[:, None], in_kind[None, :]] & ~out_id[:, None]
    possible = types & ids & (same | across_ok)
    return np.where(possible, np.where(same, within, across), np.inf)


def env_of_key(param_key: str) -> str:
    """The environment of a parameter node key (``env/tool:in:path``)."""
    return param_key.split("/", 1)[0]


def build_graph(
    manifests: Sequence[Manifest],
    embedder,
    *,
    threshold: float = THRESHOLD,
    cross_threshold: float = CROSS_THRESHOLD,
    llm=None,
    refine: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> ToolGraph:
    """Build the graph of `manifests`; `llm` (an `LLMConfig`) marks user-providable inputs, `refine` edges.

    `progress(done, total)` is called as the parameters' texts are embedded (what a cold build spends
    its time on).
    """
    import networkx as nx
    import numpy as np

    g = nx.DiGraph()
    ins: list[Param] = []
    outs: list[Param] = []
    for manifest in sorted(manifests, key=lambda m: m.name):
        for spec in manifest.tools:
            wire = spec.model_dump(mode="json", by_alias=True, exclude_none=True)
            tid = tool_id(manifest.name, spec.name)
            g.add_node(
                tid,
                node="tool",
                env=manifest.name,
                tool=spec.name,
                domain=manifest.domain,
                description=spec.description,
                read_only=bool(spec.annotations.get("readOnlyHint")),
                destructive=bool(spec.annotations.get("destructiveHint")),
            )
            for order, param in enumerate(input_params(manifest.name, wire)):
                g.add_node(param.key, **_param_attrs(param, order))
                g.add_edge(param.key, tid, rel="input", required=param.required)
                ins.append(param)
            for order, param in enumerate(output_params(manifest.name, wire)):
                g.add_node(param.key, **_param_attrs(param, order))
                g.add_edge(tid, param.key, rel="output")
                outs.append(param)
    started = time.perf_counter()
    within = min(threshold, REFINE_FLOOR) if refine else threshold
    floors = pair_floors(outs, ins, within, cross_threshold)
    sim = similarity_matrix(outs, ins, embedder, progress, floors)
    embedded = time.perf_counter()
    candidates: dict[str, list[tuple[Param, float]]] = {}
    for i, j in np.argwhere(sim >= np.minimum(floors, REFINE_FLOOR)):
        out, inp = outs[i], ins[j]
        if compatible(out, inp):
            candidates.setdefault(inp.key, []).append((out, float(sim[i, j])))
    accepted: dict[str, list[tuple[Param, float, str]]] = {
        key: [
            (o, s, "embedding")
            for o, s in pairs
            if s > (threshold if o.env == env_of_key(key) else cross_threshold)
        ]
        for key, pairs in candidates.items()
    }
    meta: dict[str, Any] = {
        "model": embedder.id,
        "threshold": threshold,
        "cross_threshold": cross_threshold,
        "weights": {"name_type": NAME_WEIGHT, "description": DESCRIPTION_WEIGHT},
        "environments": [
            {"name": m.name, "version": m.version, "domain": m.domain, "manifest_digest": m.digest}
            for m in sorted(manifests, key=lambda m: m.name)
        ],
        "user_providable_by": "rules",
        "refined_by": None,
    }
    if llm is not None:
        import anyio

        from envreg.synth.refine import mark_user_providable, refine_edges

        marks = anyio.run(mark_user_providable, llm, [p for p in ins], g)
        for key, value in marks.items():
            g.nodes[key]["user_providable"] = value
            g.nodes[key]["user_providable_by"] = "llm"
        meta["user_providable_by"] = f"llm:{llm.model}" if marks else "rules (the LLM gave no usable answer)"
        if refine:
            accepted = anyio.run(refine_edges, llm, candidates, accepted, g)
            meta["refined_by"] = f"llm:{llm.model}"
    for key, pairs in accepted.items():
        for out, score, source in pairs:
            g.add_edge(out.key, key, rel="feeds", similarity=score, source=source)
    chain: Counter[tuple[str, str]] = Counter()
    for u, v, d in list(g.edges(data=True)):
        if d["rel"] == "feeds":
            chain[(g.nodes[u]["tool_id"], g.nodes[v]["tool_id"])] += 1
    for (a, b), count in chain.items():
        g.add_edge(a, b, rel="chain", weight=count)
    timings = {"embedding": embedded - started, "edges": time.perf_counter() - embedded}
    return ToolGraph(g, meta, timings)


def canonical_graph_text(graph: ToolGraph) -> str:
    return canonical_json(graph.to_json())
