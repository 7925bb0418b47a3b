"""`envreg report --html OUT/`: the console's pages for some files, written as static HTML (for CI artifacts).

The same renderers as the daemon's ``/ui`` with links between files; what acts on a daemon (sandboxes,
forms that call tools, search, filters) is left out. Rewards are scored as `envreg reward score` scores them.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from envreg.console import catalog as catalog_pages
from envreg.console import episodes, validation
from envreg.console.app import data_index, file_url
from envreg.console.catalog import Catalog
from envreg.console.data import DataFiles, sniff
from envreg.console.html import STATIC_FILES, Site, e, link, static_file
from envreg.console.scoring import EpisodeScores

SITE = Site(static=True)


async def export(
    files: list[Path],
    out: Path,
    catalog: Catalog | None,
    runtime,
    progress: Callable[[str], None] = lambda _: None,
) -> int:
    """Write the pages under `out`; returns how many. Raises `ValueError` for a file the console cannot read."""
    for path in files:
        if not path.is_file():
            raise ValueError(f"no such file: {path}")
        if sniff(path) is None:
            raise ValueError(
                f"{path}: not a trajectory / rollout file (JSON Lines or a JSON list), an `envreg validate --json` "
                "report or a tool graph"
            )
    out.mkdir(parents=True, exist_ok=True)
    (out / "static").mkdir(exist_ok=True)
    for name in STATIC_FILES:
        (out / "static" / name).write_bytes(static_file(name))
    data = DataFiles(files=tuple(p.resolve() for p in files))
    written = 0

    def write(name: str, html: str) -> None:
        nonlocal written
        (out / name).write_text(html)
        written += 1

    found = data.scan()
    home = (
        "<ul>"
        + "".join(f"<li>{link(file_url(SITE, f), f.label)} ({e(f.kind)})</li>" for f in found)
        + "</ul>"
    )
    if catalog is not None:
        home += f"<p>{link(SITE.url('catalog'), 'The catalog')}: {len(catalog.manifests)} environments.</p>"
    write(SITE.url(), SITE.page("envreg report", home))
    write(SITE.url("data"), data_index(SITE, data))
    scores = EpisodeScores(runtime)
    try:
        for f in found:
            progress(f.label)
            if f.kind == "validation":
                write(
                    SITE.url("data", f.id),
                    validation.validation_page(SITE, f, json.loads(f.path.read_text())),
                )
                continue
            if f.kind == "graph":
                continue
            index = data.index(f)
            for n, summary in enumerate(index.summaries):
                breakdown, error = await scores.get(f.id, n, index.row(n))
                write(
                    SITE.url("data", f.id, str(n)),
                    episodes.episode_page(SITE, f, summary, index.row(n), breakdown, error),
                )
            rewards = scores.rewards(f.id)
            pages = max(1, -(-len(index) // episodes.PAGE_SIZE))
            for page in range(1, pages + 1):
                html = episodes.list_page(SITE, f, index, rewards, page=page)
                write(SITE.url("data", f.id, page=page), html)
                if page == 1:
                    write(SITE.url("data", f.id), html)
    finally:
        await scores.close()
    if catalog is not None:
        catalog.graph_file = data.graph_file()
        write(SITE.url("catalog"), catalog_pages.catalog_page(SITE, catalog))
        for m in catalog.manifests.values():
            write(SITE.url("env", m.name), catalog_pages.env_page(SITE, catalog, m))
            for tool in m.tools:
                write(
                    SITE.url("env", m.name, "tool", tool.name),
                    catalog_pages.tool_page(SITE, m, tool.name) or "",
                )
        for domain in catalog.domains():
            write(SITE.url("graph", domain), catalog_pages.graph_page(SITE, catalog, domain))
    return written
