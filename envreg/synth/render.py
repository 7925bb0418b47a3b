"""Pictures of the tool graph: one per domain (SVG or PNG), tools as boxes coloured by environment,
arrows for tool-to-tool dependencies; tools of other domains that feed in or are fed are drawn grey."""

from __future__ import annotations

from pathlib import Path

import networkx as nx

from envreg.synth.graph import ToolGraph


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
        nx.draw_networkx_edges(
            sub, pos, ax=ax, arrows=True, arrowsize=10, edge_color="#777777", alpha=0.6, node_size=900
        )
        nx.draw_networkx_nodes(
            sub,
            pos,
            ax=ax,
            node_shape="s",
            node_size=900,
            node_color=[colour.get(g.nodes[n]["env"], "#dddddd") for n in nodes],
            alpha=[1.0 if n in own else 0.35 for n in nodes],
        )
        nx.draw_networkx_labels(
            sub, pos, ax=ax, labels={n: n.replace("/", "/\n") for n in nodes}, font_size=7
        )
        ax.set_title(f"{domain}: {len(own)} tools of {', '.join(envs)}; {len(edges)} dependencies")
        ax.axis("off")
        path = out / f"graph-{domain}.{fmt}"
        fig.savefig(path, format=fmt, bbox_inches="tight")
        plt.close(fig)
        paths.append(path)
    return paths
