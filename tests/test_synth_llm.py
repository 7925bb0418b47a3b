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
    assert result.rejections["state"] + result.rejections["coverage"] >= 3, "the lazy attempts' 'Done!'"
    for t in trajectories:
        assert t.meta["verification"]["kept_turns"] == len(t.turns) == t.meta["verification"]["oracle_turns"]
        assert any("turn 0: " in f for f in t.meta["pass_at_k"]["failures"]), "where the lazy attempt failed"
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
    for line in written["messages"].read_text().splitlines():
        messages = json.loads(line)["messages"]
        arguments = [c["function"]["arguments"] for m in messages for c in m.get("tool_calls") or ()]
        assert arguments and all("oops" not in a for a in arguments), "malformed calls are not targets"
        assert [m["role"] for m in messages[1:4]] == ["user", "assistant", "user"], "simulated user's answer"


def test_a_read_only_turn_the_model_skipped_is_never_kept() -> None:
    """Issue 21: a trace passed when the chain reached the right final state, though the model had
    answered a read-only turn with "Done!" and called nothing."""
    with StandInLLM(ScriptedModel(behaviours=("skip_reads",))) as server:
        llm = LLMConfig(base_url=server.base_url, model="standin", attempts=2)

        async def run():
            async with Runtime() as rt:
                synth = Synthesizer(rt, catalog_graph(), seed=4, llm=llm, k=1, envs=["calendar", "bank"])
                return await synth.run(6, concurrency=2, max_attempts=24)

        result = anyio.run(run)
    assert result.trajectories, "the turns before a skipped one are kept"
    assert result.rejections["coverage"] >= 1
    for t in result.trajectories:
        kept = [(c["env"], c["tool"], c["arguments"]) for c in t.meta["oracle"]]
        assert kept == [(c.env, c.tool, c.arguments) for c in t.calls], "every kept turn made its own calls"
        assert not any(turn.answer == "Done!" for turn in t.turns)


def _seeded_run(concurrency: int):
    with StandInLLM(ScriptedModel(behaviours=("malformed",))) as server:
        llm = LLMConfig(base_url=server.base_url, model="standin", attempts=2)

        async def run():
            async with Runtime() as rt:
                synth = Synthesizer(
                    rt,
                    catalog_graph(),
                    seed=4,
                    llm=llm,
                    k=1,
                    envs=["calendar", "bank"],
                    round_size=2,
                    seed_pool=3,
                )
                return await synth.run(5, concurrency=concurrency), synth

        result, synth = anyio.run(run)
        prompts = [
            r["messages"][1]["content"]
            for r in server.requests
            if "messages" in r and "write the user's request" in r["messages"][-1]["content"]
        ]
    return result, synth, prompts


def test_accepted_requests_seed_the_next_rounds_prompts_deterministically() -> None:
    """COVERT stage 1: accepted trajectories' requests are examples in later rounds; same seed, same run."""
    one, synth, prompts = _seeded_run(1)
    two, _, _ = _seeded_run(2)
    assert [t.id for t in one.trajectories] == [t.id for t in two.trajectories] and len(one.trajectories) == 5
    examples = [t.meta["query"]["examples"] for t in one.trajectories]
    assert examples == [t.meta["query"]["examples"] for t in two.trajectories], "whatever the concurrency"
    first_round = [t.meta["index"] < 2 for t in one.trajectories]
    assert [not shown for shown in examples] == first_round, "examples from the second round on"
    assert not all(first_round)
    accepted = {turn.query for t in one.trajectories for turn in t.turns}
    assert all(e["query"] in accepted for shown in examples for e in shown)
    assert all(len(shown) <= 3 for shown in examples) and len(synth.seed_pool.examples) <= 3, "bounded"
    assert sum("solved and verified for other tasks" in p for p in prompts) >= 3


def test_a_model_that_refuses_everything_falls_back_to_templates() -> None:
    with StandInLLM(ScriptedModel(refuse_all=True)) as server:
        llm = LLMConfig(base_url=server.base_url, model="standin", attempts=2)
        result, reports = anyio.run(_synthesize, llm, 2)
    assert len(result.trajectories) == 2
    for t in result.trajectories:
        assert t.query_source == "template" and "fallback" in t.meta["query"]
    assert result.llm_stats["refusals"] >= 4
    assert all(r.ok for r in reports)


def test_cli_run_with_an_llm_reports_rejected_turns_per_level(tmp_path) -> None:
    from synth_helpers import MANIFESTS
    from typer.testing import CliRunner

    from envreg.cli.main import app

    catalog_graph().save(tmp_path / "graph.json")
    with StandInLLM(ScriptedModel()) as server:
        args = ["synth", "run", "-n", "2", "--seed", "4", "--graph", str(tmp_path / "graph.json")]
        args += [
            "--manifests",
            str(MANIFESTS),
            "--env",
            "calendar",
            "--env",
            "bank",
            "-o",
            str(tmp_path / "out"),
        ]
        args += ["--llm-base-url", server.base_url, "--model", "standin", "--round-size", "1"]
        result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "2 llm" in result.output
    import re

    counts = dict(re.findall(r"solved turns rejected: (\w+)\W+(\d+)", result.output))
    assert set(counts) == {"format", "execution", "state", "coverage", "judge"}
    assert int(counts["state"]) + int(counts["coverage"]) >= 2, "each chain's lazy attempt, rejected"
