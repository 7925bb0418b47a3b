"""The topology-aware sampler: the guarantee holds for any seed over whatever catalog exists."""

from __future__ import annotations

import pytest

nx = pytest.importorskip("networkx", reason="needs envreg's synth extra: run scripts/bootstrap")

from synth_helpers import catalog_graph  # noqa: E402

from envreg.synth.graph import ToolGraph  # noqa: E402
from envreg.synth.sample import TopologySampler, check_chain  # noqa: E402


def test_every_required_input_is_user_providable_or_produced_earlier() -> None:
    graph = catalog_graph()
    for max_envs in (1, 3):
        sampler = TopologySampler(graph, max_envs=max_envs, max_tools=8, max_depth=3)
        lengths = []
        for seed in range(400):
            chain = sampler.sample(seed)
            assert check_chain(graph, chain, max_envs=max_envs) == [], (seed, chain.to_json())
            assert len(chain.envs) <= max_envs
            assert len({s.tool for s in chain.steps}) == len(chain.steps), "no tool twice"
            lengths.append(len(chain.steps))
        assert max(lengths) >= 4, "chains of several tools exist"


def test_same_seed_same_chain_and_envs_filter() -> None:
    graph = catalog_graph()
    sampler = TopologySampler(graph)
    assert sampler.sample(7).to_json() == sampler.sample(7).to_json()
    starts = {chain.steps[0].tool for chain in (sampler.sample(s) for s in range(30)) if chain.steps}
    assert len(starts) > 5, "different seeds start from different tools"
    only = TopologySampler(graph, envs=["bank"])
    for seed in range(50):
        assert only.sample(seed).envs in ([], ["bank"])


def _tiny_graph() -> ToolGraph:
    """make_thing(name) -> thing_id -> use_thing(thing_id); orphan(secret_id) has no producer."""
    g = nx.DiGraph()

    def tool(name: str) -> None:
        g.add_node(f"x/{name}", node="tool", env="x", tool=name, domain="d", description=name)

    def inp(tool_name: str, name: str, providable: bool) -> str:
        key = f"x/{tool_name}:in:{name}"
        g.add_node(
            key,
            node="param",
            env="x",
            tool=tool_name,
            tool_id=f"x/{tool_name}",
            direction="in",
            path=[name],
            name=name,
            required=True,
            user_providable=providable,
            order=0,
            kind="id",
        )
        g.add_edge(key, f"x/{tool_name}", rel="input", required=True)
        return key

    for name in ("make_thing", "use_thing", "orphan"):
        tool(name)
    inp("make_thing", "name", True)
    target = inp("use_thing", "thing_id", False)
    inp("orphan", "secret_id", False)
    out = "x/make_thing:out:id"
    g.add_node(
        out,
        node="param",
        env="x",
        tool="make_thing",
        tool_id="x/make_thing",
        direction="out",
        path=["id"],
        name="id",
    )
    g.add_edge("x/make_thing", out, rel="output")
    g.add_edge(out, target, rel="feeds", similarity=0.99)
    g.add_edge("x/make_thing", "x/use_thing", rel="chain", weight=1)
    return ToolGraph(g, {"environments": []})


def test_a_tool_whose_input_nothing_provides_is_never_sampled_and_producers_come_first() -> None:
    graph = _tiny_graph()
    sampler = TopologySampler(graph, max_tools=3)
    for seed in range(100):
        chain = sampler.sample(seed)
        tools = [s.tool for s in chain.steps]
        assert "x/orphan" not in tools
        if "x/use_thing" in tools:
            assert tools.index("x/make_thing") < tools.index("x/use_thing")
            binding = chain.steps[tools.index("x/use_thing")].bindings["x/use_thing:in:thing_id"]
            assert binding.source == "step" and binding.output == "x/make_thing:out:id"
    assert TopologySampler(graph, max_depth=0).sample(0, start="x/use_thing").steps == []
