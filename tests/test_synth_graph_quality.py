"""Graph quality as a measured property: the catalog graph's cross-environment edges against a labelled
set (tests/fixtures/graph_edges.json: sampled candidate edges, each labelled sensible or wrong by
reading the two tools, with the reason), typed value kinds, and a new environment linking like the
catalog's environments do."""

from __future__ import annotations

import json

from conftest import FIXTURES
from synth_helpers import CACHE, catalog_graph, catalog_manifests

from envreg.env import load_environment
from envreg.manifest import build_manifest
from envreg.synth.embed import make_embedder
from envreg.synth.graph import build_graph

LABELS = json.loads((FIXTURES / "graph_edges.json").read_text())
PRECISION, RECALL = 0.90, 0.80


def cross_edges(graph) -> set[tuple[str, str]]:
    g = graph.graph
    return {
        (u, v)
        for u, v, d in g.edges(data=True)
        if d["rel"] == "feeds" and g.nodes[u]["env"] != g.nodes[v]["env"]
    }


def test_the_labelled_set_is_cross_environment_and_says_why() -> None:
    graph = catalog_graph().graph
    assert len(LABELS) >= 150
    assert len({(e["output"], e["input"]) for e in LABELS}) == len(LABELS), "no edge labelled twice"
    for edge in LABELS:
        out, inp = graph.nodes[edge["output"]], graph.nodes[edge["input"]]
        assert out["direction"] == "out" and inp["direction"] == "in", edge
        assert out["env"] != inp["env"], edge
        assert edge["label"] in ("sensible", "wrong") and len(edge["reason"]) > 20, edge
    sensible = sum(e["label"] == "sensible" for e in LABELS)
    assert 0.25 < sensible / len(LABELS) < 0.75, "both labels are well represented"


def test_cross_environment_edges_are_precise_and_find_the_sensible_ones() -> None:
    produced = cross_edges(catalog_graph())
    made = [e for e in LABELS if (e["output"], e["input"]) in produced]
    wrong = [f"{e['output']} -> {e['input']}" for e in made if e["label"] == "wrong"]
    sensible = [e for e in LABELS if e["label"] == "sensible"]
    missed = [f"{e['output']} -> {e['input']}" for e in sensible if (e["output"], e["input"]) not in produced]
    precision = 1 - len(wrong) / len(made)
    recall = 1 - len(missed) / len(sensible)
    assert precision >= PRECISION, f"precision {precision:.3f}; wrong edges made: {wrong}"
    assert recall >= RECALL, f"recall {recall:.3f}; sensible edges missed: {missed}"


def test_value_kinds_keep_each_environments_own_values_at_home() -> None:
    """Issue 21: any currency fed opening a bank account, a ride's distance a workout, an event's start a workout."""
    graph = catalog_graph()
    g = graph.graph
    produced = cross_edges(graph)
    ends = {v for _, v in produced}
    assert g.nodes["bank/open_account:in:currency"]["value_kind"] == "local"
    for local in (
        "bank/open_account:in:currency",
        "fitness/log_workout:in:start",
        "fitness/log_workout:in:distance_km",
    ):
        assert local not in ends, f"{local} is fed from another environment"
    kinds = {g.nodes[u]["value_kind"] for u, _ in produced}
    assert {"email", "city", "address", "geo.lat", "stock.symbol", "date.birth"} <= kinds
    assert all(
        g.nodes[u]["value_kind"] == g.nodes[v]["value_kind"] or g.nodes[u]["value_kind"] == "date.booked"
        for u, v in produced
    )
    assert g.nodes["calendar/get_contact:out:email"]["value_kind"] == "email"
    assert g.nodes["hotel/reserve_room:out:nights.*.date"]["value_kind"] == "date.booked"
    assert g.nodes["hotel/cancel_reservation:out:nights.*.date"]["value_kind"] == "date.day", (
        "a cancelled stay's nights"
    )


def test_a_new_environments_shared_parameters_link_like_the_catalogs() -> None:
    """Issue 21: a newly authored environment's `email` got no cross-environment edge at all."""
    venues = build_manifest(load_environment(str(FIXTURES / "venues")))
    graph = build_graph([*catalog_manifests(), venues], make_embedder(cache_dir=CACHE))
    g = graph.graph

    def feeders(param: str) -> set[str]:
        return {u for u in graph.feeders(param) if g.nodes[u]["env"] != g.nodes[param]["env"]}

    def fed(param: str) -> set[str]:
        return {v for v in g.successors(param) if g.nodes[v]["env"] != g.nodes[param]["env"]}

    catalog = {"email": "payments/find_customers:in:email", "city": "weather/get_forecast:in:city"}
    for name, peer in catalog.items():
        mine = feeders(f"venues/book_table:in:{name}")
        theirs = feeders(peer) - {u for u in feeders(peer) if u.startswith("venues/")}
        assert mine, f"the new environment's {name} links to nothing"
        assert {g.nodes[u]["value_kind"] for u in mine} == {name}
        assert len(mine & theirs) >= 0.5 * len(theirs), f"{name}: {len(mine & theirs)} of {len(theirs)}"
    day = feeders("venues/book_table:in:day")
    assert day and {g.nodes[u]["value_kind"] for u in day} == {"date.booked"}, "the days of a stay or a trip"
    assert day & feeders("weather/get_forecast:in:date"), "as the weather's day links"
    outputs = fed("venues/list_bookings:out:*.email") | fed("venues/list_bookings:out:*.city")
    assert "payments/find_customers:in:email" in outputs and "weather/get_forecast:in:city" in outputs
