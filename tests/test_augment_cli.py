"""`envreg augment`: every COVERT family applied to scenarios and records, each variant verified; the
LLM families through the OpenAI-compatible stand-in (envreg.standin)."""

from __future__ import annotations

import json
import re

import anyio
import pyarrow.parquet as pq
import pytest
from reward_helpers import as_tool_call_tags
from synth_helpers import manifests_by_name
from typer.testing import CliRunner

from envreg.cli.main import app
from envreg.env import states_equal
from envreg.reward.augment import augmentation_for, load_catalog, rank_distractors
from envreg.reward.score import Scorer
from envreg.reward.truth import read_truth
from envreg.runtime import Runtime
from envreg.standin import StandInLLM, text
from envreg.synth.augment import AugmentOptions, augment_records
from envreg.synth.export import export
from envreg.synth.llm import LLMConfig
from envreg.synth.scenarios import scenario_record

runner = CliRunner()
CATALOG = load_catalog()
OPTIONS = AugmentOptions(seed=3, catalog=CATALOG, embed="tfidf", errors=0.7)
RUNTIME = ["distractors", "formats", "noise", "errors"]


def records():
    return [
        scenario_record("bank", "pay_new_payee_chain"),
        scenario_record("calendar", "book_meeting_with_contact"),
    ]


async def run(families, options=OPTIONS, llm=None, inputs=None):
    async with Runtime() as rt:
        return await augment_records(rt, inputs or records(), families, options, llm)


def oracle_output(record) -> str:
    """What a policy that retries failed attempts and states its facts answers: the record's own calls."""
    calls = [c.model_dump() for c in record.calls]
    return as_tool_call_tags(calls, answer=" ".join(t.answer for t in record.turns))


def test_every_runtime_family_keeps_the_oracle_and_says_what_it_did() -> None:
    variants = anyio.run(run, RUNTIME)
    assert [v.reason for v in variants if v.record is None] == []
    originals = {r.id: r for r in records()}
    for variant in variants:
        record, original = variant.record, originals[variant.source]
        assert record.id == f"{original.id}.{variant.family}" and record.meta["augmented_from"] == original.id
        assert set(record.meta["augmentation"]) == {e.name for e in record.envs}
        labels = record.meta["augmentation_labels"]["calls"]
        injected = {(lab["turn"], lab["call"]) for lab in labels if lab["kind"] == "injected_error"}
        for k, (turn, before) in enumerate(zip(record.turns, original.turns, strict=True)):
            assert states_equal(turn.states, before.states), "every turn ends in the oracle's state"
            kept = [c for i, c in enumerate(turn.calls) if (k, i) not in injected]
            assert [(c.tool, c.arguments, c.result) for c in kept] == [
                (c.tool, c.arguments, c.result) for c in before.calls
            ], "the oracle's calls and results, the injected attempts aside"
        if variant.family == "errors":
            failed = [lab for lab in labels if lab["kind"] == "injected_error"]
            assert failed and all(
                lab["error"] in ("timeout", "rate_limited", "unavailable") for lab in failed
            )
            for lab in failed:  # the failed attempt, then its retry
                turn = record.turns[lab["turn"]]
                attempt, retry = turn.calls[lab["call"]], turn.calls[lab["call"] + 1]
                assert attempt.is_error and "Retry" in attempt.result and retry.tool == attempt.tool
        if variant.family == "formats":
            assert {lab["format"] for lab in labels} <= {"yaml", "xml", "markdown"}
            shown = [c.observation for t in record.turns for c in t.calls if c.observation]
            assert shown and not any(o.startswith(("{", "[")) for o in shown), "what the agent saw, reshaped"
        if variant.family == "noise":
            assert labels and all(lab["noise"] for lab in labels)
        if variant.family == "distractors":
            decoys = record.meta["augmentation"][record.envs[0].name]["distractors"]
            assert len(decoys) == 3 and not {d["name"] for d in decoys} & {
                t["name"] for t in CATALOG[record.envs[0].name]
            }


def test_augmented_records_export_with_decoys_and_score_under_their_augmentation(tmp_path) -> None:
    variants = [v.record for v in anyio.run(run, RUNTIME)]
    written = export(variants, tmp_path, manifests_by_name(), ["messages", "rl"])
    by_id = {
        json.loads(line)["envreg"]["trajectory_id"]: json.loads(line)
        for line in written["messages"].read_text().splitlines()
    }
    for record in variants:
        tools = {t["function"]["name"] for t in by_id[record.id]["tools"]}
        decoys = record.meta["augmentation"][record.envs[0].name]["distractors"]
        assert {d["name"] for d in decoys} <= tools, "decoys are listed as the rollouts list them"
        observations = [m["content"] for m in by_id[record.id]["messages"] if m["role"] == "tool"]
        assert [
            c.observation
            or (
                c.result
                if isinstance(c.result, str)
                else json.dumps(c.result, ensure_ascii=False, separators=(",", ":"))
            )
            for c in record.calls
        ] == observations
    rows = pq.read_table(written["rl"]).to_pylist()

    async def score():
        async with Runtime() as rt:
            scorer = Scorer(rt)
            out = []
            for record in variants:
                out.append(await scorer.score(record, oracle_output(record)))
            for row in rows:
                truth = read_truth(row["reward_model"]["ground_truth"], row["extra_info"])
                gt = json.loads(row["reward_model"]["ground_truth"])
                out.append(await scorer.score(truth, as_tool_call_tags(gt["calls"], answer=gt["answer"])))
                assert truth.augmentation, "the row carries the augmentation its rollouts run under"
            return out

    results = anyio.run(score)
    assert all(r.reward == 1.0 for r in results), [(r.id, r.gate, r.missing) for r in results if r.reward < 1]
    assert sum(r.injected_errors for r in results) >= 1, "failed attempts replay as injected errors"


def test_distractor_overlap_knob() -> None:
    ranked = [t["name"] for _, t in rank_distractors("bank", CATALOG, embed="tfidf")]
    names = {
        overlap: [
            d["name"]
            for d in augmentation_for(
                "bank", seed=4, distractors=3, overlap=overlap, catalog=CATALOG, embed="tfidf"
            ).distractors
        ]
        for overlap in ("high", "medium", "low")
    }
    assert set(names["high"]) == set(ranked[:3]), "the three most similar tools"
    assert set(names["medium"]) <= set(ranked[:9])
    assert set(names["low"]) <= set(ranked[len(ranked) // 2 :]), "from the least similar half"
    with pytest.raises(ValueError, match="overlap must be one of"):
        augmentation_for("bank", distractors=2, overlap="some", catalog=CATALOG, embed="tfidf")


# ------------------------------------------------------------------------------------ LLM families
REQUEST = re.compile(r"Request: (.*?)(\n|$)")
LEAVE = re.compile(r'no longer gives the (.*?) \("(.*?)"\)')


class Editor:
    """Rewrites requests faithfully, leaves out the asked value, and judges as told."""

    def __init__(self, judge_ok: bool = True) -> None:
        self.judge_ok = judge_ok
        self.asked: list[str] = []

    def __call__(self, body: dict) -> dict:
        system, prompt = body["messages"][0]["content"], body["messages"][1]["content"]
        self.asked.append(system[:30])
        if system.startswith("You review"):
            return text(json.dumps({"ok": self.judge_ok, "reason": "scripted"}))
        query = REQUEST.search(prompt).group(1)
        if system.startswith("You edit"):
            what, value = LEAVE.search(prompt).groups()
            return text(
                json.dumps({"query": re.sub(re.escape(value), f"the right {what}", query, flags=re.I)})
            )
        return text(json.dumps({"query": f"Hi there! {query}"}))


def test_llm_families_rewrite_and_make_problematic_queries_with_the_judges_label() -> None:
    editor = Editor()
    options = AugmentOptions(seed=1, catalog=CATALOG, embed="tfidf", indirection=2)
    with StandInLLM(editor) as server:
        llm = LLMConfig(base_url=server.base_url, model="standin", attempts=2)
        variants = anyio.run(run, ["rewrite", "problematic"], options, llm)
    assert [v.reason for v in variants if v.record is None] == []
    rewrites = [v.record for v in variants if v.family == "rewrite"]
    for record in rewrites:
        labels = record.meta["augmentation_labels"]["queries"]
        assert all(label["kind"] == "rewritten" and label["indirection"] == 2 for label in labels)
        assert all(turn.query.startswith("Hi there! ") for turn in record.turns)
    for record in (v.record for v in variants if v.family == "problematic"):
        (label,) = record.meta["augmentation_labels"]["queries"]
        assert label["kind"] == "problematic_query" and label["judged"] is True
        turn = record.turns[-1]
        assert len(record.turns) == label["turn"] + 1 and turn.calls == []
        assert label["value"].lower() not in turn.query.lower(), "the value the user must give is gone"
        assert record.final_states == (
            record.initial_states if label["turn"] == 0 else record.turns[-2].states
        )

        async def scores(record=record, turn=turn):
            async with Runtime() as rt:
                scorer = Scorer(rt)
                unit = read_truth(record).units()[-1]
                ask = await scorer.score(unit, turn.answer)
                vague = await scorer.score(unit, "Sure, I'll take care of it!")
                empty = await scorer.score(unit, "")
                return ask.reward, vague.reward, empty.reward

        assert anyio.run(scores) == (1.0, 0.0, 0.0), "only asking for what is missing earns the turn"
    assert any(a.startswith("You review") for a in editor.asked), "the judge was asked"


def test_a_label_the_judge_does_not_confirm_is_not_kept() -> None:
    with StandInLLM(Editor(judge_ok=False)) as server:
        llm = LLMConfig(base_url=server.base_url, model="standin", attempts=2)
        variants = anyio.run(run, ["problematic", "errors"], OPTIONS, llm)
    assert all(v.record is None for v in variants)
    assert {v.family for v in variants if "judge" in v.reason} == {"problematic", "errors"}


# -------------------------------------------------------------------------------------------- CLI
def test_cli_augments_scenarios_and_records(tmp_path) -> None:
    result = runner.invoke(
        app, ["augment", "--scenarios", "calendar", "--embed", "tfidf", "-o", str(tmp_path / "a")]
    )
    assert result.exit_code == 0, result.output
    lines = (tmp_path / "a" / "augmented.jsonl").read_text().splitlines()
    assert lines and all(json.loads(line)["meta"]["augmentation_family"] in RUNTIME for line in lines)
    for family in RUNTIME:
        assert re.search(rf"{family}\W+\d+", result.output), family
    again = runner.invoke(
        app,
        [
            "augment",
            str(tmp_path / "a" / "augmented.jsonl"),
            "-f",
            "formats",
            "--embed",
            "tfidf",
            "-o",
            str(tmp_path / "b"),
        ],
    )
    assert again.exit_code == 0, again.output
    no_llm = runner.invoke(app, ["augment", "--scenarios", "calendar", "-f", "problematic"])
    assert no_llm.exit_code == 2 and "needs an LLM" in no_llm.output and "hint:" in no_llm.output
    bad = runner.invoke(app, ["augment", "--scenarios", "calendar", "-f", "sparkle"])
    assert bad.exit_code == 2 and "unknown --family sparkle" in bad.output
    nothing = runner.invoke(app, ["augment"])
    assert nothing.exit_code == 2 and "nothing to augment" in nothing.output
