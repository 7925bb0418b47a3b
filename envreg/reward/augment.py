"""Host side of COVERT augmentation: choose distractor tools from the catalog and build per-sandbox configs.

The mechanism itself (formats, noise, injected errors, decoys) runs where tool results are produced:
`envreg.env.augment`, in the environment server's instances and in local-tier sandboxes. This
module decides *what* to apply, deterministically from a seed:

```python
config = augmentation_for("calendar", seed=7, formats=["json", "yaml"], errors=0.2, distractors=3)
sb = await rt.sandbox("calendar", isolation="container", augment=config)   # MCP agents see it too
labels = await sb.augmentation_labels()                                     # exported with the record
```

Distractors are tools of *other* environments, drawn by their similarity to this environment's own
tools: ``overlap="high"`` takes the most similar ones (decoys that look like the real tools),
``"medium"`` draws from the `pool` times as many most similar ones, ``"low"`` from the least similar
half (decoys easy to tell apart).
Similarity is the cosine of text vectors of each tool (name, description, parameter names): by
default the synth graph's embeddings (`envreg.synth.embed`, sentence-transformers all-MiniLM-L6-v2,
cached by content digest; needs ``envreg[synth]``), or any `embed` function, or ``embed="tfidf"``:
TF-IDF vectors of the same text, which need nothing but the manifests.
"""

from __future__ import annotations

import copy
import json
import math
import re
from collections import Counter
from collections.abc import Callable, Sequence
from functools import cache, lru_cache
from pathlib import Path
from typing import Any, Literal

from envreg.env.augment import Augmentation, Format, unit

Embed = Callable[[list[str]], Sequence[Sequence[float]]]
Overlap = Literal["high", "medium", "low"]
OVERLAPS: tuple[Overlap, ...] = ("high", "medium", "low")
Similarity = Embed | Literal["graph", "tfidf"]
_WORD = re.compile(r"[a-z0-9]+")


def load_catalog(folder: Path | None = None) -> dict[str, list[dict[str, Any]]]:
    """Tools per environment, from the generated manifests (default: `envreg.config.manifests_root`)."""
    from envreg.config import manifests_root

    catalog = {}
    for path in sorted((folder or manifests_root()).glob("*.json")):
        manifest = json.loads(path.read_text())
        catalog[manifest["name"]] = [
            {k: t[k] for k in ("name", "description", "inputSchema", "annotations") if k in t}
            for t in (_wire(t) for t in manifest["tools"])
        ]
    return catalog


def _manifests_catalog() -> tuple[dict[str, list[dict[str, Any]]], str]:
    """`load_catalog()` and its JSON, read again only when a manifest changed (for `augmentation_for`, which
    hands out copies of what it takes from it)."""
    from envreg.config import manifests_root

    root = manifests_root()
    stamp = tuple((p.name, (st := p.stat()).st_mtime_ns, st.st_size) for p in sorted(root.glob("*.json")))
    return _catalog_read(root, stamp)


@lru_cache(maxsize=4)
def _catalog_read(
    root: Path, stamp: tuple[tuple[str, int, int], ...]
) -> tuple[dict[str, list[dict[str, Any]]], str]:
    catalog = load_catalog(root)
    return catalog, json.dumps(catalog)


def _wire(tool: dict[str, Any]) -> dict[str, Any]:
    """A manifest tool entry in MCP wire form."""
    return {
        "name": tool["name"],
        "description": tool.get("description", ""),
        "inputSchema": tool.get("input_schema") or tool.get("inputSchema") or {"type": "object"},
        "annotations": tool.get("annotations", {}),
    }


def tool_text(tool: dict[str, Any]) -> str:
    params = " ".join(tool.get("inputSchema", {}).get("properties", {}))
    return f"{tool['name'].replace('_', ' ')}. {tool.get('description', '')} {params.replace('_', ' ')}"


def tfidf_vectors(texts: list[str]) -> list[dict[str, float]]:
    """Sparse unit TF-IDF vectors (the fallback when no embedding model is given)."""
    docs = [Counter(_WORD.findall(t.lower())) for t in texts]
    df = Counter(word for doc in docs for word in doc)
    n = len(docs)
    vectors = []
    for doc in docs:
        v = {w: c * math.log((1 + n) / (1 + df[w]) + 1) for w, c in doc.items()}
        norm = math.sqrt(sum(x * x for x in v.values())) or 1.0
        vectors.append({w: x / norm for w, x in v.items()})
    return vectors


def _cosine_sparse(a: dict[str, float], b: dict[str, float]) -> float:
    if len(a) > len(b):
        a, b = b, a
    return sum(x * b.get(w, 0.0) for w, x in a.items())


def _dense_scores(vectors: Sequence[Sequence[float]], n_own: int) -> list[float]:
    """For each vector after the first `n_own`, its best cosine with one of the first `n_own`."""
    import numpy as np

    matrix = np.asarray(vectors, dtype=np.float64)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    matrix = matrix / np.where(norms == 0, 1, norms)
    return (matrix[n_own:] @ matrix[:n_own].T).max(axis=1).tolist()


@cache
def graph_embed(cache_dir: Path | None = None) -> Embed:
    """The synth tool graph's embedding model, cached on disk by content digest (``envreg[synth]``)."""
    try:
        from envreg.synth.embed import make_embedder
    except ImportError as exc:
        raise ImportError(
            f"distractors by embeddings need the synth extra ({exc}): pip install 'envreg[synth]', "
            "or pass embed='tfidf'"
        ) from None
    return make_embedder(cache_dir=cache_dir).encode  # pyright: ignore[reportReturnType]


def rank_distractors(
    env: str, catalog: dict[str, list[dict[str, Any]]], embed: Similarity = "graph"
) -> list[tuple[float, dict[str, Any]]]:
    """Other environments' tools, most similar to any of `env`'s tools first (same-name tools excluded).

    Ranked once per environment, catalog content and `embed` (an augmentation run asks again for every
    record); the tools returned are `catalog`'s own."""
    return _ranked(env, catalog, json.dumps(catalog), embed)


def _ranked(
    env: str, catalog: dict[str, list[dict[str, Any]]], text: str, embed: Similarity
) -> list[tuple[float, dict[str, Any]]]:
    """`rank_distractors` with the catalog's JSON (its key order kept: it is in the texts an embedding model
    reads), which keys the cache."""
    if env not in catalog:
        raise ValueError(
            f"no environment {env!r} in the catalog (have: {', '.join(sorted(catalog)) or 'none'})"
        )
    rank = _ranking if _hashable(embed) else _ranking.__wrapped__  # an `embed` that cannot be a cache key
    return [(score, catalog[name][index]) for score, name, index in rank(env, text, embed)]


def _hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


@lru_cache(maxsize=64)
def _ranking(env: str, catalog_json: str, embed: Similarity) -> tuple[tuple[float, str, int], ...]:
    """`rank_distractors` as (score, environment, index of the tool in its list)."""
    catalog = json.loads(catalog_json)
    own = catalog[env]
    own_names = {t["name"] for t in own}
    others = [
        (name, index, tool)
        for name, tools in sorted(catalog.items())
        if name != env
        for index, tool in enumerate(tools)
        if tool["name"] not in own_names
    ]
    if not others:
        return ()
    texts = [tool_text(t) for t in own + [tool for _, _, tool in others]]
    if embed != "tfidf":
        if embed == "graph":
            embed = graph_embed()
        scores = _dense_scores(embed(texts), len(own))
    else:
        sparse = tfidf_vectors(texts)
        mine_s, theirs_s = sparse[: len(own)], sparse[len(own) :]
        scores = [max(_cosine_sparse(o, m) for m in mine_s) for o in theirs_s]
    ranked = sorted(zip(scores, others, strict=True), key=lambda p: (-p[0], p[1][2]["name"]))
    seen: set[str] = set()
    unique = []
    for score, (name, index, tool) in ranked:
        if tool["name"] not in seen:
            seen.add(tool["name"])
            unique.append((score, name, index))
    return tuple(unique)


def augmentation_for(
    env: str,
    *,
    seed: int = 0,
    formats: list[Format] | None = None,
    noise: float = 0.0,
    errors: float = 0.0,
    distractors: int = 0,
    catalog: dict[str, list[dict[str, Any]]] | None = None,
    embed: Similarity = "graph",
    pool: int = 3,
    overlap: Overlap = "medium",
) -> Augmentation:
    """A deterministic augmentation for one sandbox of `env`.

    `distractors` decoys are drawn (by the seed) from the tools of the other environments of `catalog`
    (default: ``manifests/``) ranked by `embed` (see the module), as `overlap` says.
    """
    if overlap not in OVERLAPS:
        raise ValueError(f"overlap must be one of {', '.join(OVERLAPS)}, not {overlap!r}")
    decoys: list[dict[str, Any]] = []
    if distractors > 0:
        tools, text = (catalog, json.dumps(catalog)) if catalog is not None else _manifests_catalog()
        ranked = [tool for _, tool in _ranked(env, tools, text, embed)]
        if overlap == "high":
            candidates = ranked[:distractors]
        elif overlap == "medium":
            candidates = ranked[: max(distractors, pool * distractors)]
        else:
            candidates = ranked[len(ranked) // 2 :]
        candidates = sorted(candidates, key=lambda t: unit(seed, "decoy", t["name"]))
        decoys = copy.deepcopy(candidates[:distractors])  # `catalog`'s or the cache's: never shared
    return Augmentation(
        seed=seed, formats=formats or ["json"], noise=noise, errors=errors, distractors=decoys
    )


# query rewriting -------------------------------------------------------------------------------------
REWRITE_SYSTEM = (
    "You rewrite user requests to a tool-using assistant. {level} Change the wording, the order and the "
    'tone. Answer with JSON only: {{"query": "<the rewritten request>"}}.'
)
INDIRECTION = {
    1: "Keep the meaning and every concrete value (names, ids, emails, numbers, amounts, dates, times, "
    "places) exactly as written.",
    2: "Keep the meaning. Values the conversation already produced (listed as known) may be referred to "
    "instead of repeated ('the account from before', 'that flight'); keep every other value exactly.",
    3: "Say the user's goal rather than the steps, as a person would. Values the conversation already "
    "produced (listed as known) may be referred to instead of repeated; keep every other value exactly.",
}


def query_values(query: str, arguments: list[Any]) -> list[str]:
    """The oracle's argument values that the query spells out: a rewrite must keep every one of them."""
    found: list[str] = []

    def visit(value: Any) -> None:
        if isinstance(value, dict):
            for v in value.values():
                visit(v)
        elif isinstance(value, list):
            for v in value:
                visit(v)
        elif not isinstance(value, bool) and isinstance(value, str | int | float):
            text = json.dumps(value) if isinstance(value, int | float) else value
            if len(text) >= 2 and text.lower() in query.lower() and text not in found:
                found.append(text)

    visit(arguments)
    return found


async def rewrite_queries(record: Any, llm: Any, indirection: int = 1) -> Any:
    """A copy of the `Trajectory` whose turns' queries an LLM rewrote, oracle preserved.

    `indirection`: 1 paraphrases (every value kept), 2 may refer to values earlier turns produced
    instead of repeating them, 3 says the goal rather than the steps (with the same references). A
    rewrite is kept only when it still spells out every value of the turn's oracle calls that the
    original spelled out and that no earlier result gave (`query_values`), so the same calls answer
    it; otherwise, or when the model refuses or never answers the asked JSON, the original stays.
    Each turn is labelled in ``meta["augmentation_labels"]["queries"]``: ``rewritten`` (with the
    indirection level), or ``kept`` with the reason. `llm` is an `envreg.synth.llm.LLMConfig`.
    """
    from envreg.synth.llm import chat_json

    if indirection not in INDIRECTION:
        raise ValueError(f"indirection must be 1, 2 or 3, not {indirection!r}")

    def check(value: Any) -> None:
        if (
            not isinstance(value, dict)
            or not isinstance(value.get("query"), str)
            or not value["query"].strip()
        ):
            raise ValueError('expected {"query": "<text>"}')

    out = record.model_copy(deep=True)
    labels = []
    produced: list[Any] = []  # results of the turns before: what a rewrite may refer to
    system = REWRITE_SYSTEM.format(level=INDIRECTION[indirection])
    for index, turn in enumerate(out.turns):
        spelled = query_values(turn.query, [c.arguments for c in turn.calls])
        known = set(query_values(json.dumps(produced, ensure_ascii=False), [c.arguments for c in turn.calls]))
        needed = spelled if indirection == 1 else [v for v in spelled if v not in known]
        prompt = f"Request: {turn.query}"
        if indirection > 1 and known:
            prompt += f"\nKnown from earlier in the conversation: {', '.join(sorted(known))}"
        produced += [c.result for c in turn.calls if not c.is_error]
        answer = await chat_json(llm, system, prompt, check)
        if answer is None:
            labels.append({"turn": index, "kind": "kept", "reason": "no valid answer from the model"})
            continue
        rewritten = answer["query"].strip()
        lost = [v for v in needed if v.lower() not in rewritten.lower()]
        if lost:
            labels.append({"turn": index, "kind": "kept", "reason": f"the rewrite lost {lost}"})
            continue
        labels.append(
            {"turn": index, "kind": "rewritten", "indirection": indirection, "original": turn.query}
        )
        turn.query = rewritten
    out.meta.setdefault("augmentation_labels", {})["queries"] = labels
    return out
