"""Executed trajectories on the local tier: replay, determinism, exports and their formats, CLI."""

from __future__ import annotations

import json
import os
import random

import anyio
import pyarrow.parquet as pq
import pytest
from conftest import envreg_without
from synth_helpers import CACHE, MANIFESTS, catalog_graph, manifests_by_name
from typer.testing import CliRunner

from envreg.canonical import canonical_json, sha256_hex
from envreg.cli.main import app
from envreg.runtime import Runtime
from envreg.runtime.snapshots import snapshot_address
from envreg.synth.execute import Synthesizer
from envreg.synth.export import export, read_trajectories
from envreg.synth.records import Trajectory, split_function_name
from envreg.synth.replay import replay
from envreg.synth.sample import Binding, Step
from envreg.synth.values import SAME_ID, ArgumentFiller, coerce, extract, fits, records

runner = CliRunner()
N = 24


async def synthesize(n: int = N, seed: int = 11, **options) -> tuple[list[Trajectory], Synthesizer]:
    async with Runtime() as rt:
        synth = Synthesizer(rt, catalog_graph(), seed=seed, **options)
        result = await synth.run(n, concurrency=4)
        return result.trajectories, synth


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    out = tmp_path_factory.mktemp("synth-export")
    trajectories, _ = anyio.run(synthesize)
    written = export(trajectories, out, manifests_by_name())
    return trajectories, written


# ------------------------------------------------------------------------------------------ values
def test_values_fit_and_coerce() -> None:
    assert fits("2026-01-06", {"type": "string", "format": "date"})
    assert not fits("2026-01-06T09:00:00", {"type": "string", "format": "date"})
    assert coerce("2026-01-06T09:00:00", {"type": "string", "format": "date"}) == "2026-01-06"
    assert coerce("2026-02-14", {"type": "string", "pattern": "^\\d{4}-(0[1-9]|1[0-2])$"}) == "2026-02"
    assert coerce(0, {"type": "integer", "exclusiveMinimum": 0}) is None
    assert extract(
        [{"id": "a", "xs": [{"v": 1}]}, {"id": "b", "xs": [{"v": 2}, {"v": 1}]}], ["*", "xs", "*", "v"]
    ) == [1, 2]


def test_state_values_come_from_one_record() -> None:
    """search_flights gets the origin, destination and day of one real flight of the state."""
    from envreg.env import load_environment

    graph = catalog_graph()
    state = load_environment("airline").initial_state().to_json()
    flights = {(f["origin"], f["destination"], f["departure"][:10]) for f in state["flights"].values()}
    step = Step(
        "airline/search_flights",
        {p: Binding("user") for p in graph.inputs("airline/search_flights")},
    )
    filler = ArgumentFiller(graph, {"airline": state}, random.Random(3))
    for _ in range(20):
        arguments, masked = filler.fill(step, {})
        assert (arguments["origin"], arguments["destination"], arguments["date"]) in flights
        assert masked == []
    assert "flights.*" in records(state) and "users.*.payment_methods.*" in records(state)


def test_two_ids_of_one_call_are_never_the_same() -> None:
    """Issue 21: bank/transfer got the same account twice (the run's most frequent refusal)."""
    graph = catalog_graph()
    opened = Step("bank/open_account", {})
    listed = Step("bank/list_accounts", {})
    source = "bank/open_account:out:account.id"
    transfer = Step(
        "bank/transfer",
        {
            "bank/transfer:in:from_account_id": Binding("step", 1, source),
            "bank/transfer:in:to_account_id": Binding("step", 1, source),
            "bank/transfer:in:amount_cents": Binding("user"),
        },
    )
    new_account = {"account": {"id": "acc_0009", "currency": "EUR"}}
    accounts = [{"id": "acc_0001"}, {"id": "acc_0009"}]
    for seed in range(20):
        filler = ArgumentFiller(graph, {"bank": {}}, random.Random(seed), [listed, opened, transfer])
        arguments, _ = filler.fill(transfer, {0: accounts, 1: new_account})
        assert {arguments["from_account_id"], arguments["to_account_id"]} == {"acc_0001", "acc_0009"}
    alone = ArgumentFiller(graph, {"bank": {}}, random.Random(0), [listed, opened, transfer])
    assert alone.fill(transfer, {1: new_account}) is None and alone.problem == SAME_ID, "no second account"


# ---------------------------------------------------------------------------------- trajectories
def test_every_exported_trajectory_replays_to_its_final_states(exported) -> None:
    trajectories, written = exported
    from_file = read_trajectories(written["trajectories"])
    assert [t.id for t in from_file] == [t.id for t in trajectories] and len(from_file) == N

    async def check():
        async with Runtime() as rt:
            return [await replay(rt, t, "local") for t in from_file]

    reports = anyio.run(check)
    assert [r.mismatches for r in reports if not r.ok] == []
    assert sum(r.calls for r in reports) == sum(len(t.calls) for t in from_file) >= 2 * N
    # and a tampered record is caught
    bad = from_file[0].model_copy(deep=True)
    bad.final_states[bad.envs[0].name]["now"] = "2030-01-01T00:00:00"

    async def check_bad():
        async with Runtime() as rt:
            return await replay(rt, bad, "local")

    assert not anyio.run(check_bad).ok


def test_records_are_real_and_stamped(exported) -> None:
    trajectories, _ = exported
    envs_seen = set()
    for t in trajectories:
        assert t.query_source == "template" and all(turn.query.startswith("Please ") for turn in t.turns)
        assert 1 <= len(t.envs) <= 3
        assert all(1 <= len(turn.calls) <= 5 for turn in t.turns)
        assert all(not c.is_error for c in t.calls), "failed attempts are not recorded"
        assert set(t.snapshot_ids) == {e.name for e in t.envs}
        for env in t.envs:
            envs_seen.add(env.name)
            assert env.manifest_digest == manifests_by_name()[env.name].digest
            assert env.image_digest is None, "local tier"
            assert t.initial_state_sha256[env.name] == sha256_hex(canonical_json(t.initial_states[env.name]))
            address = snapshot_address(env.name, env.manifest_digest, t.initial_state_sha256[env.name])
            assert t.snapshot_ids[env.name] == "sha256:" + address
            assert t.final_state_sha256[env.name] == sha256_hex(canonical_json(t.final_states[env.name]))
        for turn in t.turns:
            assert set(turn.states) == set(turn.state_sha256) == {e.name for e in t.envs}
        assert t.turns[-1].states == t.final_states
        graph = catalog_graph()
        for call in t.calls:
            for name in call.masked:
                node = graph.node(f"{call.env}/{call.tool}:in:{name}")
                assert node["kind"] in ("free_text", "search")
    assert len(envs_seen) >= 2, "chains over several environments of the catalog"


def test_same_seed_same_trajectories() -> None:
    first, _ = anyio.run(synthesize, 8, 5)
    again, _ = anyio.run(lambda: synthesize(8, 5, initial="mixed"))
    assert [canonical_json(t.model_dump()) for t in first] == [canonical_json(t.model_dump()) for t in again]
    other, _ = anyio.run(synthesize, 8, 6)
    assert [t.id for t in other] != [t.id for t in first]


# ---------------------------------------------------------------------------------------- formats
def test_envfactory_files(exported) -> None:
    trajectories, written = exported
    for t in trajectories:
        data = json.loads((written["envfactory"] / f"{t.id}.json").read_text())
        assert data["seed"] == t.seed and data["envreg"]["trajectory_id"] == t.id
        assert len(data["nodes"]) == len(t.turns)
        for node, turn in zip(data["nodes"], t.turns, strict=True):
            assert node["decision"] is True and node["query"] == turn.query
            roles = [s["role"] for s in node["steps"]]
            inputs, outputs = {"user", "tool_response"}, {"assistant", "tool_call"}
            assert all(r in (inputs if i % 2 == 0 else outputs) for i, r in enumerate(roles)), roles
            assert all(
                isinstance(c, str)
                for s in node["steps"]
                if s["role"] == "tool_response"
                for c in s["content"]
            )
            assert node["final_scenario"] == turn.states
        assert data["nodes"][0]["initial_scenario"] == t.initial_states


def test_sft_sharegpt(exported) -> None:
    import datasets

    trajectories, written = exported
    info = json.loads((written["sft"].parent / "dataset_info.json").read_text())["envreg_sft"]
    assert info["formatting"] == "sharegpt" and info["columns"]["tools"] == "tools"
    data = json.loads(written["sft"].read_text())
    assert len(data) == len(trajectories)
    for record, t in zip(data, trajectories, strict=True):
        roles = [m["from"] for m in record["conversations"]]
        # LLaMA-Factory: human/observation at odd positions, gpt/function_call at even ones
        assert all(
            r in (("human", "observation") if i % 2 == 0 else ("gpt", "function_call"))
            for i, r in enumerate(roles)
        )
        calls = [json.loads(m["value"]) for m in record["conversations"] if m["from"] == "function_call"]
        envs = [e.name for e in t.envs]
        assert [split_function_name(c["name"], envs) for c in calls] == [(c.env, c.tool) for c in t.calls]
        assert [c["arguments"] for c in calls] == [c.arguments for c in t.calls]
        tool_names = {tool["name"] for tool in json.loads(record["tools"])}
        assert {c["name"] for c in calls} <= tool_names
        assert record["envreg"]["final_state_sha256"] == t.final_state_sha256
    loaded = datasets.load_dataset("json", data_files=str(written["sft"]), split="train")
    assert loaded.num_rows == len(trajectories) and "conversations" in loaded.column_names


def test_openai_messages(exported) -> None:
    from envreg.reward.answer import missing_facts

    trajectories, written = exported
    records = [json.loads(line) for line in written["messages"].read_text().splitlines()]
    assert len(records) == len(trajectories)
    for record, t in zip(records, trajectories, strict=True):
        messages, envs = record["messages"], [e.name for e in t.envs]
        assert messages[0]["role"] == "system" and messages[1] == {
            "role": "user",
            "content": t.turns[0].query,
        }
        issued, calls = set(), []
        for m in messages:
            for c in m.get("tool_calls") or ():
                assert m["role"] == "assistant" and c["type"] == "function"
                issued.add(c["id"])
                calls.append(
                    (
                        *split_function_name(c["function"]["name"], envs),
                        json.loads(c["function"]["arguments"]),
                    )
                )
            if m["role"] == "tool":
                assert m["tool_call_id"] in issued, "every result answers a call made before it"
        assert calls == [(c.env, c.tool, c.arguments) for c in t.calls]
        answers = [m["content"] for m in messages if m["role"] == "assistant" and not m.get("tool_calls")]
        assert len(answers) == len(t.turns)
        for answer, turn in zip(answers, t.turns, strict=True):
            assert not missing_facts(turn.facts or [], answer), (
                "a read-only turn's answer states what was found"
            )
        names = {tool["function"]["name"] for tool in record["tools"]}
        assert {c["function"]["name"] for m in messages for c in m.get("tool_calls") or ()} <= names
        assert record["envreg"]["trajectory_id"] == t.id


def test_hugging_face_datasets(exported) -> None:
    import datasets

    trajectories, written = exported
    dataset = datasets.load_from_disk(str(written["hf"]))
    assert isinstance(dataset, datasets.DatasetDict) and set(dataset) == {"train", "test"}
    assert sum(split.num_rows for split in dataset.values()) == len(trajectories)
    features = dataset["train"].features
    call = features["messages"].feature["tool_calls"].feature
    assert call["function"]["arguments"] == datasets.Value("string"), (
        "arguments as JSON text, as OpenAI sends them"
    )
    assert features["tools"] == datasets.Value("string") and features["envs"] == datasets.List(
        datasets.Value("string")
    )
    by_id = {t.id: t for t in trajectories}
    plain = {
        json.loads(line)["envreg"]["trajectory_id"]: json.loads(line)
        for line in written["messages"].read_text().splitlines()
    }
    for row in dataset["train"]:
        t = by_id[row["id"]]
        assert [m["role"] for m in row["messages"]] == [m["role"] for m in plain[t.id]["messages"]]
        assert json.loads(row["tools"]) == plain[t.id]["tools"]
        assert json.loads(row["provenance"])["snapshot_ids"] == t.snapshot_ids
    from envreg.synth.export import hf_dataset

    again = hf_dataset(trajectories, manifests_by_name(), test_fraction=0.5)
    assert again["test"].num_rows > 0 and [r["id"] for r in again["test"]] == [
        r["id"] for r in hf_dataset(trajectories, manifests_by_name(), test_fraction=0.5)["test"]
    ], "a record's split follows from its id"


def test_rl_parquet_for_verl(exported) -> None:
    import datasets

    trajectories, written = exported
    table = pq.read_table(written["rl"])
    assert {"data_source", "prompt", "ability", "reward_model", "extra_info"} <= set(table.column_names)
    rows = table.to_pylist()
    assert len(rows) == sum(len(t.turns) for t in trajectories)
    by_id = {t.id: t for t in trajectories}
    for row in rows:
        info = row["extra_info"]
        t = by_id[info["trajectory_id"]]
        turn = t.turns[info["turn"]]
        assert row["prompt"][-1] == {"role": "user", "content": turn.query}
        assert row["prompt"][0]["role"] == "system"
        truth = json.loads(row["reward_model"]["ground_truth"])
        assert [
            (c["env"], c["tool"], c["arguments"], c["masked_arguments"], c["result"]) for c in truth["calls"]
        ] == [(c.env, c.tool, c.arguments, c.masked, c.result) for c in turn.calls]
        assert truth["facts"] == turn.facts and truth["answer"] == turn.answer
        before = t.initial_states if info["turn"] == 0 else t.turns[info["turn"] - 1].states
        assert json.loads(info["initial_states"]) == before
        assert json.loads(info["final_states"]) == turn.states
        assert json.loads(info["provenance"])["snapshot_ids"] == t.snapshot_ids
    loaded = datasets.load_dataset("parquet", data_files=str(written["rl"]), split="train")
    assert loaded.num_rows == len(rows) and loaded[0]["data_source"] == "envreg"


def test_doing_nothing_earns_nothing_on_any_rl_row(exported) -> None:
    """Issue 21: an empty answer scored 0.5 on every turn that changed no state (and malformed calls 0.4)."""
    from envreg.reward.score import Scorer
    from envreg.reward.truth import read_truth

    _, written = exported
    rows = pq.read_table(written["rl"]).to_pylist()
    nothing = [
        "",
        "Sure, done!",
        "I'm sorry, I can't help with that.",
        '<tool_call>{"name": oops</tool_call>',
    ]

    async def scores():
        async with Runtime() as rt:
            scorer = Scorer(rt)
            truths = [read_truth(r["reward_model"]["ground_truth"], r["extra_info"]) for r in rows]
            return [[(await scorer.score(t, output)).reward for output in nothing] for t in truths]

    worst = max(max(row) for row in anyio.run(scores))
    assert worst <= 0.1, f"doing nothing scored {worst} on some row"


# -------------------------------------------------------------------------------------------- CLI
def test_cli_run_replay_export(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("ENVREG_CACHE", str(CACHE))
    out = tmp_path / "run"
    result = runner.invoke(
        app, ["synth", "run", "-n", "6", "--seed", "2", "--manifests", str(MANIFESTS), "-o", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert "trajectories" in result.output and "6 template" in result.output
    assert {p.name for p in out.iterdir()} >= {
        "graph.json",
        "trajectories.jsonl",
        "sft.json",
        "messages.jsonl",
        "rl.parquet",
        "envfactory",
        "hf",
    }
    replayed = runner.invoke(app, ["synth", "replay", str(out / "trajectories.jsonl")])
    assert replayed.exit_code == 0 and "6 match, 0 differ" in replayed.output
    again = runner.invoke(
        app,
        ["synth", "export", str(out / "trajectories.jsonl"), "-o", str(tmp_path / "ex"), "--format", "sft"],
    )
    assert again.exit_code == 0, again.output
    assert json.loads((tmp_path / "ex" / "sft.json").read_text()) == json.loads(
        (out / "sft.json").read_text()
    )
    lines = (out / "trajectories.jsonl").read_text().splitlines()
    record = json.loads(lines[0])
    record["final_states"][record["envs"][0]["name"]]["now"] = "2031-01-01T00:00:00"
    (tmp_path / "bad.jsonl").write_text(json.dumps(record) + "\n")
    differ = runner.invoke(app, ["synth", "replay", str(tmp_path / "bad.jsonl")])
    assert differ.exit_code == 1 and "final state" in differ.output
    (tmp_path / "junk.jsonl").write_text("{not json}\n")
    junk = runner.invoke(app, ["synth", "replay", str(tmp_path / "junk.jsonl")])
    assert junk.exit_code == 1 and "junk.jsonl:1" in junk.output
    bad_tier = runner.invoke(app, ["synth", "run", "--isolation", "vm"])
    assert bad_tier.exit_code == 2 and "--isolation" in bad_tier.output


def test_a_run_leaves_out_what_needs_a_missing_extra_and_refuses_it_by_name(tmp_path) -> None:
    """Without tau2 installed, a run over the catalog samples from the other environments and says which it left
    out and why (before, a chain that drew a tau2 environment ended the run in an ExceptionGroup); an environment
    asked for by name is refused with what to install, on any tier (the run reads its scenarios on the host)."""
    graph = tmp_path / "graph.json"
    catalog_graph().save(graph)
    args = ["synth", "run", "-n", "3", "--seed", "2", "--graph", str(graph), "--manifests", str(MANIFESTS)]
    args += ["--format", "trajectories", "-o", str(tmp_path / "out"), "--json"]
    env = {**os.environ, "ENVREG_CACHE": str(CACHE)}
    whole = envreg_without({"tau2", "loguru"}, args, env=env)
    assert whole.returncode == 0, whole.stderr
    assert "skipped: tau2-airline: its code needs tau2" in whole.stderr and "envreg[tau2]" in whole.stderr
    report = json.loads(whole.stdout)
    assert sorted(report["left_out"]) == ["tau2-airline", "tau2-retail", "tau2-telecom"]
    assert report["trajectories"] == 3
    drawn = {e.name for t in read_trajectories(tmp_path / "out" / "trajectories.jsonl") for e in t.envs}
    assert drawn and not {e for e in drawn if e.startswith("tau2-")}

    for tier in ("local", "container"):
        named = envreg_without(
            {"tau2", "loguru"}, [*args, "--env", "tau2-airline", "--isolation", tier], env=env
        )
        assert named.returncode == 1, named.stderr
        assert "tau2-airline cannot be synthesized here: its code needs tau2" in named.stderr, named.stderr
        assert "envreg[tau2]" in named.stderr and "Traceback" not in named.stderr, named.stderr
