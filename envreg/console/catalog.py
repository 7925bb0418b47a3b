"""Catalog pages: every environment (domain, version, digests), its tools with their schemas as forms and
as JSON, its state schema, scenarios and rejected states; a search across tools; a domain's tool graph."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from envreg.console.forms import schema_fields, tool_form
from envreg.console.html import Site, e, json_block, link, table
from envreg.env.scenario import RejectedState, Scenario, load_scenarios
from envreg.manifest import Manifest


@dataclass
class Catalog:
    """The committed manifests (verified), and the scenarios of each environment folder found beside them."""

    manifests_dir: Path
    images_dir: Path
    graph_file: Path | None = None
    _scenarios: dict[str, tuple[list[Scenario], list[RejectedState]]] = field(default_factory=dict)

    @cached_property
    def manifests(self) -> dict[str, Manifest]:
        found = {}
        for path in sorted(self.manifests_dir.glob("*.json")):
            try:
                manifest = Manifest.loads(path.read_bytes())
            except ValueError:
                continue
            found[manifest.name] = manifest
        return dict(sorted(found.items(), key=lambda kv: (kv[1].domain, kv[0])))

    def folders(self) -> dict[str, str]:
        """Name -> environment folder, for each manifest whose folder is under `images_dir`."""
        return {
            name: str(self.images_dir / name) for name in self.manifests if (self.images_dir / name).is_dir()
        }

    def get(self, name: str) -> Manifest | None:
        return self.manifests.get(name)

    def scenarios(self, name: str) -> tuple[list[Scenario], list[RejectedState]]:
        if name not in self._scenarios:
            folder = self.images_dir / name
            try:
                self._scenarios[name] = load_scenarios(folder) if folder.is_dir() else ([], [])
            except ValueError:
                self._scenarios[name] = ([], [])
        return self._scenarios[name]

    def domains(self) -> list[str]:
        return sorted({m.domain for m in self.manifests.values()})

    def search(self, query: str) -> list[tuple[Manifest, dict[str, Any]]]:
        words = query.lower().split()
        hits = []
        for manifest in self.manifests.values():
            for tool in manifest.tools:
                text = f"{manifest.name} {manifest.domain} {tool.name} {tool.description}".lower()
                if words and all(w in text for w in words):
                    hits.append((manifest, _wire(tool)))
        return hits


def _wire(tool: Any) -> dict[str, Any]:
    return tool.model_dump(mode="json", by_alias=True, exclude_none=True)


def catalog_page(site: Site, catalog: Catalog) -> str:
    rows = []
    for m in catalog.manifests.values():
        rows.append(
            [
                link(site.url("env", m.name), m.name),
                link(site.url("graph", m.domain), m.domain),
                e(m.version),
                str(len(m.tools)),
                str(m.scenarios),
                str(m.rejected_states),
                f"<code>{e(m.digest[:19])}</code>",
                e(_first_sentence(m.description)),
            ]
        )
    heading = (
        f"<p>{len(catalog.manifests)} environments in {len(catalog.domains())} domains, from "
        f"<code>{e(catalog.manifests_dir)}</code>.</p>"
    )
    headers = ["environment", "domain", "version", "tools", "scenarios", "rejected", "manifest", "what it is"]
    return site.page("Catalog", heading + search_box(site) + table(headers, rows, numeric=(3, 4, 5)))


def _first_sentence(text: str) -> str:
    from envreg.catalog import summary_line

    return summary_line(text)


def search_box(site: Site, query: str = "") -> str:
    if site.static:
        return ""
    return (
        f'<form method="get" action="{e(site.url("search"))}" class="filters">'
        f'<label>Search tools <input type="search" name="q" value="{e(query)}"></label>'
        "<button type=submit>Search</button></form>"
    )


def env_page(site: Site, catalog: Catalog, manifest: Manifest, play: str = "") -> str:
    """One environment; `play` is the daemon's "start a sandbox" form (none in a static export)."""
    scenarios, rejected = catalog.scenarios(manifest.name)
    digests = table(
        ["digest", "value"],
        [[e(k), f"<code>{e(v)}</code>"] for k, v in manifest.digests.model_dump().items()],
    )
    tools = table(
        ["tool", "read-only", "description"],
        [
            [
                link(site.url("env", manifest.name, "tool", t.name), t.name),
                "yes" if t.annotations.get("readOnlyHint") else "",
                e(t.description),
            ]
            for t in manifest.tools
        ],
    )
    scenario_rows = [
        [
            e(s.name),
            str(len(s.steps)),
            e(", ".join(dict.fromkeys(st.tool for st in s.steps))),
            e(s.description),
        ]
        for s in scenarios
    ]
    rejected_rows = [[e(r.name), f"<code>{e(r.error)}</code>", e(r.description)] for r in rejected]
    body = (
        f"<p>{e(manifest.description)}</p>"
        f"<p>domain {link(site.url('graph', manifest.domain), manifest.domain)} · version {e(manifest.version)}"
        f" · {len(manifest.tools)} tools · {manifest.scenarios} scenarios · {manifest.rejected_states} rejected states</p>"
        f"{play}<h2>Digests</h2>{digests}<h2>Tools</h2>{tools}"
        f"<h2>State schema</h2>{schema_fields(manifest.state_schema)}"
        f"<details><summary>as JSON</summary>{json_block(manifest.state_schema)}</details>"
        f"<h2>Scenarios</h2>"
        + (
            table(["scenario", "calls", "tools", "description"], scenario_rows, numeric=(1,))
            if scenario_rows
            else '<p class="muted">none found</p>'
        )
        + "<h2>Rejected states</h2>"
        + (
            table(["case", "error it must give", "description"], rejected_rows)
            if rejected_rows
            else '<p class="muted">none found</p>'
        )
    )
    return site.page(manifest.name, body)


def tool_page(site: Site, manifest: Manifest, name: str) -> str | None:
    spec = next((t for t in manifest.tools if t.name == name), None)
    if spec is None:
        return None
    tool = _wire(spec)
    annotations = ", ".join(k for k, v in spec.annotations.items() if v) or "none"
    body = (
        f"<p>of {link(site.url('env', manifest.name), manifest.name)} · annotations: {e(annotations)}</p>"
        f"<p>{e(spec.description)}</p>"
        "<div class=cols><div>"
        f"<h2>Input</h2>{schema_fields(spec.input_schema)}<h3>as a form</h3>{tool_form(tool, None)}"
        f"<h3>as JSON</h3>{json_block(spec.input_schema)}"
        "</div><div>"
        f"<h2>Output</h2>{schema_fields(spec.output_schema)}<h3>as JSON</h3>{json_block(spec.output_schema)}"
        "</div></div>"
    )
    return site.page(f"{manifest.name} / {name}", body)


def search_page(site: Site, catalog: Catalog, query: str) -> str:
    hits = catalog.search(query)
    rows = [
        [
            link(site.url("env", m.name, "tool", t["name"]), t["name"]),
            link(site.url("env", m.name), m.name),
            e(m.domain),
            e(t["description"]),
        ]
        for m, t in hits[:500]
    ]
    if not query:
        found = "<p class=muted>Type words that every hit must contain (name, environment, domain, description).</p>"
    else:
        found = f"<p>{len(hits)} tools match <code>{e(query)}</code>.</p>" + table(
            ["tool", "environment", "domain", "description"], rows
        )
    return site.page("Search tools", search_box(site, query) + found)


def graph_page(site: Site, catalog: Catalog, domain: str) -> str:
    from envreg.console.graph import domain_svg, load_graph

    envs = [m.name for m in catalog.manifests.values() if m.domain == domain]
    intro = f"<p>Environments: {', '.join(link(site.url('env', n), n) for n in envs) or 'none'}.</p>"
    graph, why_not = load_graph(catalog.graph_file)
    if graph is None:
        return site.page(f"Tool graph: {domain}", intro + f'<p class="muted">{e(why_not)}</p>')
    svg = domain_svg(graph, domain, lambda env, tool: site.url("env", env, "tool", tool))
    return site.page(f"Tool graph: {domain}", intro + f'<div class="graph">{svg}</div>')
