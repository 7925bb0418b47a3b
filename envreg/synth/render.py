"""Pictures of the tool graph: one per domain (SVG or PNG), tools as boxes coloured by environment,
arrows for tool-to-tool dependencies; tools of other domains that feed in or are fed are drawn grey."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import networkx as nx

from envreg.synth.graph import ToolGraph

NODE_SIZE = 900
"""A tool's box: its area in points squared, as matplotlib's ``scatter`` takes it."""


def render_domains(graph: ToolGraph, out: Path | str, fmt: str = "svg") -> list[Path]:
    """Write ``graph-<domain>.<fmt>`` for every domain; returns the paths."""
    if fmt not in ("svg", "png"):
        raise ValueError(f"format must be svg or png, not {fmt!r}")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    g = graph.graph
    domains = sorted({g.nodes[t]["domain"] for t in graph.tools()})
    paths = []
    for domain in domains:
        own = [t for t in graph.tools() if g.nodes[t]["domain"] == domain]
        edges = [(u, v) for u, v, d in g.edges(data=True) if d["rel"] == "chain" and (u in own or v in own)]
        nodes = sorted(set(own) | {n for e in edges for n in e})
        sub = nx.DiGraph()
        sub.add_nodes_from(nodes)
        sub.add_edges_from(edges)
        envs = sorted({g.nodes[t]["env"] for t in own})
        palette = plt.get_cmap("tab10")
        colour = {env: palette(i % 10) for i, env in enumerate(envs)}
        fig, ax = plt.subplots(figsize=(max(8, len(nodes) * 0.55), max(6, len(nodes) * 0.4)))
        pos = nx.kamada_kawai_layout(sub) if len(nodes) > 2 else nx.circular_layout(sub)
        _draw_arrows(ax, pos, edges, NODE_SIZE)
        nx.draw_networkx_nodes(
            sub,
            pos,
            ax=ax,
            node_shape="s",
            node_size=NODE_SIZE,
            node_color=[colour.get(g.nodes[n]["env"], "#dddddd") for n in nodes],
            alpha=[1.0 if n in own else 0.35 for n in nodes],
        )
        nx.draw_networkx_labels(
            sub, pos, ax=ax, labels={n: n.replace("/", "/\n") for n in nodes}, font_size=7
        )
        ax.set_title(f"{domain}: {len(own)} tools of {', '.join(envs)}; {len(edges)} dependencies")
        ax.axis("off")
        path = out / f"graph-{domain}.{fmt}"
        # SVG text as <text> (searchable, and the pictures' main cost when drawn as paths)
        with plt.rc_context({"svg.fonttype": "none"}):
            fig.savefig(path, format=fmt, bbox_inches="tight")
        plt.close(fig)
        paths.append(path)
    return paths


def _draw_arrows(ax: Any, pos: dict[str, Any], edges: list[tuple[str, str]], node_size: float) -> None:
    """Fit the axes to every box, then draw one arrow per edge from box edge to box edge, all in one quiver:
    a patch per arrow clipped to its boxes (networkx's way) took most of the time of a picture."""
    import numpy as np

    points = np.array(list(pos.values()), dtype=float)
    low, high = points.min(axis=0), points.max(axis=0)
    pad = 0.08 * np.where(high > low, high - low, 1.0)
    ax.set_xlim(low[0] - pad[0], high[0] + pad[0])
    ax.set_ylim(low[1] - pad[1], high[1] + pad[1])
    if not edges:
        return
    to_pixels = ax.transData
    starts = to_pixels.transform(np.array([pos[u] for u, _ in edges], dtype=float))
    ends = to_pixels.transform(np.array([pos[v] for _, v in edges], dtype=float))
    delta = ends - starts
    length = np.hypot(delta[:, 0], delta[:, 1])
    unit = delta / np.where(length > 0, length, 1.0)[:, None]
    # a square box of half side h is left, along direction u, after h / max(|ux|, |uy|)
    half = np.sqrt(node_size) / 2 * ax.figure.dpi / 72 + 2
    cut = np.minimum(half / np.maximum(np.abs(unit).max(axis=1), 1e-9), length / 2)
    to_data = to_pixels.inverted()
    a = to_data.transform(starts + unit * cut[:, None])
    b = to_data.transform(ends - unit * cut[:, None])
    ax.quiver(
        a[:, 0],
        a[:, 1],
        b[:, 0] - a[:, 0],
        b[:, 1] - a[:, 1],
        angles="xy",
        scale_units="xy",
        scale=1,
        color="#777777",
        alpha=0.6,
        units="dots",
        width=1.2,
        headwidth=5,
        headlength=7,
        headaxislength=6.5,
        zorder=1,
    )
