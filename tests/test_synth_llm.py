"""The LLM path against a local OpenAI-compatible STAND-IN server (envreg.standin: scripted
answers, not a model): user-providable marking, edge refinement, OpenAI-compatible embeddings,
QueryGen, pass@k solving with native tool calls (malformed tool-call JSON and refusals included)."""

from __future__ import annotations

import json

import anyio
from synth_helpers import CACHE, ScriptedModel, catalog_graph, catalog_manifests, manifests_by_name

from envreg.runtime import Runtime
from envreg.standin import StandInLLM
from envreg.synth.embed import make_embedder
from envreg.synth.execute import Synthesizer
from envreg.synth.export import export
from envreg.synth.graph import build_graph
from envreg.synth.llm import LLMConfig
from envreg.synth.replay import replay


def test_llm_marks_user_providable_inputs_and_refines_edges() -> None:
    model = ScriptedModel()
    with StandInLLM(model) as server:
        llm = LLMConfig(base_url=server.base_url, model="standin", api_key="test-key")
        graph = build_graph(catalog_manifests(), make_embedder(cache_dir=CACHE), llm=llm, refine=True)
    assert graph.meta["user_providable_by"] == "llm:standin" and graph.meta["refined_by"] == "llm:standin"
    assert llm.stats.malformed_json >= 1, "the answer without JSON was counted and retried"
    iban = graph.node("bank/add_payee:in:iban")
    assert iban["user_providable"] is False and iban["user_providable_by"] == "llm"
    assert graph.node("calendar/create_event:in:title")["user_providable"] is True
    feeds = [(u, v, d) for u, v, d in graph.graph.edges(data=True) if d["rel"] == "feeds"]
    assert feeds and all(d["source"] == "llm" for _, _, d in feeds)
    assert not [v for _, v, _ in feeds if v.startswith("bank/")], "the model rejected every bank candidate"
    assert graph.digest != catalog_graph().digest
    assert all(r.get("model") == "standin" for r in server.requests)


def test_embeddings_from_an_openai_compatible_endpoint(tmp_path) -> None:
    with StandInLLM(ScriptedModel()) as server:
        embedder = make_embedder("fake-embed", base_url=server.base_url, cache_dir=tmp_path)
        small = [m for m in catalog_manifests() if m.name == "calendar"]
        graph = build_graph(small, embedder)
        again = make_embedder("fake-embed", base_url=server.base_url, cache_dir=tmp_path)
        assert build_graph(small, again).digest == graph.digest and again.computed == 0
        asked = [r for r in server.requests if "input" in r]
    assert asked and asked[0]["model"] == "fake-embed"
    assert graph.meta["model"].startswith("openai:fake-embed@")


async def _synthesize(llm: LLMConfig, n: int, **options):
    async with Runtime() as rt:
        synth = Synthesizer(rt, catalog_graph(), seed=4, llm=llm, k=3, envs=["calendar", "bank"], **options)
        result = await synth.run(n, concurrency=1)
        reports = [await replay(rt, t, "local") for t in result.trajectories]
        return result, reports


def test_pass_at_k_keeps_only_traces_that_reach_the_oracle(tmp_path) -> None:
    model = ScriptedModel()
    with StandInLLM(model) as server:
        llm = LLMConfig(base_url=server.base_url, model="standin", attempts=2)
        result, reports = anyio.run(_synthesize, llm, 3)
    trajectories = result.trajectories
    assert len(trajectories) == 3
    for t in trajectories:
        assert t.query_source == "llm"
        assert all(turn.query.startswith("Hi! Could you do this for me?") for turn in t.turns)
        assert t.meta["pass_at_k"]["k"] == 3 and t.meta["pass_at_k"]["passed"] == 1
        assert "refused" in t.meta["pass_at_k"]["failures"]
        assert [(c["env"], c["tool"], c["arguments"]) for c in t.meta["oracle"]] == [
            (c.env, c.tool, c.arguments) for c in t.calls
        ], "the kept trace made the oracle's calls (after recovering from malformed JSON)"
        assert set(t.meta["query"]) >= {"scenario", "subgoals", "refinements", "articulated"}
        assert all(turn.messages and turn.messages[-1]["role"] == "assistant" for turn in t.turns)
        replies = [m["content"] for turn in t.turns for m in turn.messages if m["role"] == "user"]
        assert replies and all(r == "The one I described, please go ahead." for r in replies), (
            "simulated user"
        )
    assert result.llm_stats["malformed_tool_calls"] >= 3 and result.llm_stats["refusals"] >= 3
    assert result.llm_stats["malformed_json"] == 0
    assert [r.mismatches for r in reports] == [[], [], []], "LLM traces replay to their final states"
    written = export(trajectories, tmp_path, manifests_by_name())
    sft = json.loads(written["sft"].read_text())
    for record in sft:
        calls = [m for m in record["conversations"] if m["from"] == "function_call"]
        assert all("oops" not in m["value"] for m in calls), "malformed calls are not SFT targets"
        roles = [m["from"] for m in record["conversations"]]
        assert all(
            r in (("human", "observation") if i % 2 == 0 else ("gpt", "function_call"))
            for i, r in enumerate(roles)
        )
        assert roles[:3] == ["human", "gpt", "human"], "question, simulated user's answer"


def test_a_model_that_refuses_everything_falls_back_to_templates() -> None:
    with StandInLLM(ScriptedModel(refuse_all=True)) as server:
        llm = LLMConfig(base_url=server.base_url, model="standin", attempts=2)
        result, reports = anyio.run(_synthesize, llm, 2)
    assert len(result.trajectories) == 2
    for t in result.trajectories:
        assert t.query_source == "template" and "fallback" in t.meta["query"]
    assert result.llm_stats["refusals"] >= 4
    assert all(r.ok for r in reports)
