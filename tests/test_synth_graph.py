"""The tool graph over the catalog: rules for user-providable inputs, edges, digest, pictures, CLI."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest
from synth_helpers import CACHE, MANIFESTS, catalog_graph, catalog_manifests
from typer.testing import CliRunner

from envreg.cli.main import app
from envreg.synth.embed import make_embedder
from envreg.synth.graph import ToolGraph, build_graph, compatible, load_manifests
from envreg.synth.params import Param, classify, input_params, output_params

runner = CliRunner()


def param(name: str, schema: dict, direction: str = "in", description: str = "", tool: str = "t") -> Param:
    return Param("env", tool, direction, (name,), schema, description, True)


@pytest.mark.parametrize(
    ("name", "schema", "description", "kind"),
    [
        ("event_id", {"type": "string"}, 'The event, e.g. "evt_0004".', "id"),
        ("id", {"type": "string", "pattern": "^con_\\d{4,}$"}, "", "id"),
        ("owner", {"type": "string", "pattern": "^usr_\\d+$"}, "", "id"),
        ("response", {"type": "string", "enum": ["accepted", "declined"]}, "", "enum"),
        ("day", {"type": "string", "format": "date"}, "", "date"),
        (
            "start",
            {"type": "string", "pattern": "^\\d{4}-\\d{2}-\\d{2}T\\d{2}:\\d{2}:\\d{2}$"},
            "local time",
            "datetime",
        ),
        ("earliest", {"type": "string", "format": "time"}, "", "time"),
        ("email", {"type": "string"}, "", "email"),
        ("query", {"type": "string"}, "Part of a name", "search"),
        ("title", {"type": "string"}, "", "free_text"),
        ("memo", {"type": "string"}, "", "free_text"),
        ("amount", {"type": "number"}, "", "number"),
        ("amount_cents", {"type": "integer"}, "", "number"),
        ("include_closed", {"type": "boolean"}, "", "boolean"),
        ("city", {"type": "string"}, "", "location"),
        ("first_name", {"type": "string"}, "", "name"),
        ("iban", {"type": "string"}, "", "value"),
    ],
)
def test_kinds_and_user_providable_rules(name, schema, description, kind) -> None:
    p = param(name, schema, description=description)
    assert classify(p) == kind
    assert p.user_providable is (kind != "id")


def test_rules_on_the_catalog() -> None:
    """Ids are produced by tools; enums, dates, emails, amounts and free text come from the user."""
    graph = catalog_graph()
    inputs = [graph.node(p) for t in graph.tools() for p in graph.inputs(t)]
    assert inputs
    for node in inputs:
        if node["name"].endswith("_id"):
            assert not node["user_providable"], node
        if "enum" in node["schema"] or node["kind"] in ("date", "email", "number", "free_text"):
            assert node["user_providable"], node
        assert node["masked"] == (node["kind"] in ("free_text", "search"))


def test_flattening_one_level() -> None:
    airline = next(m for m in catalog_manifests() if m.name == "airline")
    book = next(t for t in airline.tools if t.name == "book_flight").model_dump(
        by_alias=True, exclude_none=True
    )
    names = {".".join(p.path) for p in input_params("airline", book)}
    assert {"passengers.first_name", "passengers.last_name", "passengers.date_of_birth", "cabin"} <= names
    assert "passengers" not in names
    calendar = next(m for m in catalog_manifests() if m.name == "calendar")
    events = next(t for t in calendar.tools if t.name == "list_events").model_dump(
        by_alias=True, exclude_none=True
    )
    outs = {".".join(p.path) for p in output_params("calendar", events)}
    assert {"*.id", "*.title", "*.attendees.*.contact_id"} <= outs


def test_compatibility_rules() -> None:
    out_id = Param(
        "env", "list", "out", ("*", "id"), {"type": "string", "pattern": "^evt_\\d{4}$"}, entity="Event"
    )
    assert compatible(out_id, param("event_id", {"type": "string"}, description='e.g. "evt_0001"'))
    assert not compatible(out_id, param("contact_id", {"type": "string"}, description='e.g. "con_0001"'))
    elsewhere = Param("other", "list", "out", ("*", "id"), {"type": "string"}, entity="Event")
    assert not compatible(elsewhere, param("event_id", {"type": "string"})), "ids stay in their environment"
    email = Param("other", "find", "out", ("*", "email"), {"type": "string"})
    assert compatible(email, param("email", {"type": "string"})), "shared values cross environments"
    assert not compatible(out_id, param("title", {"type": "string"}))
    assert not compatible(out_id, param("event_id", {"type": "integer"}))
    count = Param("env", "x", "out", ("count",), {"type": "integer"})
    assert compatible(count, param("amount", {"type": "number"}))
    elsewhere_count = Param("a", "x", "out", ("count",), {"type": "integer"})
    assert not compatible(elsewhere_count, param("amount", {"type": "number"})), (
        "a count means something at home"
    )
    currency = Param("shop", "get_order", "out", ("currency",), {"type": "string"})
    assert not compatible(currency, param("currency", {"type": "string"})), (
        "an account's currency is not any currency"
    )


def test_known_chains_are_edges() -> None:
    """What a user expects: listing events feeds getting one; finding a customer feeds listing accounts."""
    graph = catalog_graph()
    assert "calendar/list_events:out:*.id" in graph.feeders("calendar/get_event:in:event_id")
    assert "bank/find_customer:out:*.id" in graph.feeders("bank/list_accounts:in:customer_id")
    assert "airline/search_flights:out:*.id" in graph.feeders("airline/book_flight:in:flight_id")
    assert "calendar/get_event" in graph.successors("calendar/list_events")
    for u, v, data in graph.graph.edges(data=True):
        if data["rel"] == "feeds":
            across = graph.node(u)["env"] != graph.node(v)["env"]
            assert data["similarity"] > (0.7 if across else 0.85), (u, v, data)
            assert graph.node(u)["type"] == graph.node(v)["type"] or graph.node(v)["type"] == "number"


def test_same_manifests_and_model_give_the_same_graph(tmp_path) -> None:
    first = catalog_graph()
    again = build_graph(catalog_manifests(), make_embedder(cache_dir=CACHE))
    assert again.digest == first.digest
    path = tmp_path / "graph.json"
    assert first.save(path) == first.digest
    assert ToolGraph.load(path).digest == first.digest
    assert path.read_text() == (again.save(tmp_path / "again.json") and (tmp_path / "again.json").read_text())
    data = json.loads(path.read_text())
    data["graph"]["links"].pop()
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="digest does not match"):
        ToolGraph.load(path)


def test_embeddings_are_cached_by_model_and_text(tmp_path) -> None:
    texts = ["event id (string)", 'The event\'s id, e.g. "evt_0004" (from list_events).']
    first = make_embedder(cache_dir=tmp_path)
    vectors = first.encode(texts)
    assert first.computed == 2 and vectors.shape[0] == 2
    again = make_embedder(cache_dir=tmp_path)
    assert (again.encode(list(reversed(texts))) == vectors[::-1]).all()
    assert again.computed == 0, "every text was in the cache"
    other = make_embedder("another-model", cache_dir=tmp_path)
    assert other.path != first.path, "another model has its own cache"


def test_bad_manifest_folder_is_a_clear_error(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match="no manifests"):
        load_manifests(tmp_path)
    with pytest.raises(FileNotFoundError, match="no manifest for nosuch"):
        load_manifests(MANIFESTS, ["nosuch"])


def test_cli_graph_writes_json_and_a_picture_per_domain(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("ENVREG_CACHE", str(CACHE))
    out, pics = tmp_path / "g.json", tmp_path / "pics"
    result = runner.invoke(
        app, ["synth", "graph", "--manifests", str(MANIFESTS), "-o", str(out), "--render", str(pics)]
    )
    assert result.exit_code == 0, result.output
    assert "tools" in result.output and catalog_graph().digest in result.output
    assert ToolGraph.load(out).digest == catalog_graph().digest
    domains = {m.domain for m in catalog_manifests()}
    svgs = sorted(pics.glob("graph-*.svg"))
    assert {p.stem.removeprefix("graph-") for p in svgs} == domains
    svg_ns = "{http://www.w3.org/2000/svg}"
    for svg in svgs:
        root = ET.parse(svg).getroot()
        assert root.tag == f"{svg_ns}svg"
        title = next(t.text for t in root.iter(f"{svg_ns}text") if t.text and "dependencies" in t.text)
        stated = int(title.rsplit("; ", 1)[1].split()[0])
        arrows = [g for g in root.iter(f"{svg_ns}g") if g.get("id", "").startswith("Quiver")]
        drawn = sum(len(list(g.iter(f"{svg_ns}path"))) for g in arrows)
        assert drawn == stated, f"{svg.name}: {drawn} arrows drawn for {title!r}"
    png = runner.invoke(
        app, ["synth", "graph", "--env", "calendar", "-o", str(out), "--render", str(pics), "--format", "png"]
    )
    assert png.exit_code == 0, png.output
    assert (pics / "graph-office.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    bad = runner.invoke(app, ["synth", "graph", "--manifests", str(tmp_path / "none")])
    assert bad.exit_code == 1 and "no manifests" in bad.output
