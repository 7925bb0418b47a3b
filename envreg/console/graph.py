"""A domain's tool graph as an inline SVG whose boxes link to the tools: the graph `envreg synth graph`
builds (its JSON, `-o FILE`), drawn the way `envreg synth graph --render` draws it (tools of the domain
coloured by environment, tools of other domains that feed in or are fed grey, arrows for dependencies)."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from envreg.console.html import e

PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7", "#9c755f")
BOX_W, BOX_H = 150, 26


def load_graph(path: Path | None) -> tuple[Any, str]:
    """(the `ToolGraph`, "") or (None, why there is none)."""
    if path is None:
        return None, (
            "No tool graph: build one with `envreg synth graph -o DIR/tool-graph.json` and start the daemon "
            "with `envreg serve --ui-data DIR` (or pass it to `envreg report`)."
        )
    try:
        from envreg.synth.graph import ToolGraph
    except ImportError:
        return None, "The tool graph needs the synth extra (networkx): pip install 'envreg[synth]'."
    try:
        return ToolGraph.load(path), ""
    except (OSError, ValueError) as exc:
        return None, f"{path}: {exc}"


def domain_svg(graph: Any, domain: str, tool_url: Callable[[str, str], str]) -> str:
    g = graph.graph
    own = [t for t in graph.tools() if g.nodes[t].get("domain") == domain]
    edges = sorted(
        (u, v) for u, v, d in g.edges(data=True) if d.get("rel") == "chain" and (u in own or v in own)
    )
    nodes = sorted(set(own) | {n for edge in edges for n in edge})
    if not nodes:
        return f'<p class="muted">The graph has no tools of domain {e(domain)}.</p>'
    envs = sorted({g.nodes[t]["env"] for t in own})
    colour = {env: PALETTE[i % len(PALETTE)] for i, env in enumerate(envs)}
    radius = max(160.0, len(nodes) * (BOX_H + 14) / math.pi)
    size = 2 * radius + BOX_W + 40
    centre = size / 2
    pos = {
        n: (
            centre + radius * math.cos(2 * math.pi * i / len(nodes)),
            centre + radius * math.sin(2 * math.pi * i / len(nodes)),
        )
        for i, n in enumerate(nodes)
    }
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {size:.0f} {size:.0f}" width="{size:.0f}" '
        f'height="{size:.0f}" role="img" aria-label="tool graph of {e(domain)}">',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" '
        'orient="auto-start-reverse"><path d="M0,0L10,5L0,10z" fill="#777"/></marker></defs>',
    ]
    for u, v in edges:
        (x1, y1), (x2, y2) = pos[u], pos[v]
        dx, dy = x2 - x1, y2 - y1
        length = math.hypot(dx, dy) or 1.0
        shrink = min(0.45 * length, BOX_H)  # stop at the box's edge (roughly)
        x2, y2 = x2 - dx / length * shrink, y2 - dy / length * shrink
        parts.append(
            f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="#777" stroke-opacity=".6" '
            'marker-end="url(#arrow)"/>'
        )
    for n in nodes:
        x, y = pos[n]
        env, _, tool = n.partition("/")
        fill = colour.get(env, "#dddddd") if n in own else "#dddddd"
        opacity = "1" if n in own else ".5"
        parts.append(
            f'<a href="{e(tool_url(env, tool))}" class="tool-node" data-tool="{e(n)}"><title>{e(n)}</title>'
            f'<rect x="{x - BOX_W / 2:.1f}" y="{y - BOX_H / 2:.1f}" width="{BOX_W}" height="{BOX_H}" rx="4" '
            f'fill="{fill}" fill-opacity="{opacity}" stroke="#444"/>'
            f'<text x="{x:.1f}" y="{y + 4:.1f}" font-size="10" text-anchor="middle">{e(_short(tool))}</text></a>'
        )
    legend = " ".join(f'<tspan fill="{colour[env]}">■ {e(env)}</tspan>' for env in envs)
    parts.append(
        f'<text x="10" y="18" font-size="12">{legend} · {len(own)} tools, {len(edges)} dependencies</text>'
    )
    parts.append("</svg>")
    return "".join(parts)


def _short(text: str, limit: int = 24) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
