"""User queries for executed chains: templates without an LLM, EnvFactory's QueryGen with one.

QueryGen (LLM) works in four stages, each a JSON answer that is checked and retried:
scenario (who the user is and why), subgoals (one per turn), goal articulation (one natural
request per turn that needs exactly that turn's calls) and calibrated refinement, where each turn
gets one strategy drawn by the seeded RNG: implicit reference (refer to earlier results instead of
repeating them), action compression (say the goal, not the steps), ambiguity (leave out a detail the
assistant must ask for; the simulated user knows it) or goal expansion (a broader goal that the
calls fulfil). A stage that never gives valid JSON makes the whole trajectory fall back to
templates, and the record says so (``query_source: "template"``, ``meta.query.fallback``).
"""

from __future__ import annotations

import json
import random
import re
from typing import Any

from envreg.synth.graph import ToolGraph, tool_id
from envreg.synth.params import humanize

REFINEMENTS = ("implicit_reference", "action_compression", "ambiguity", "goal_expansion")
REFINEMENT_GUIDE = {
    "implicit_reference": "refer to things found in earlier turns implicitly ('that flight', 'the same person') instead of repeating names or values",
    "action_compression": "state the goal in one breath, not the individual steps; the assistant must work out the steps",
    "ambiguity": "leave out one detail the assistant needs, so it must ask; the simulated user will answer with it",
    "goal_expansion": "phrase a broader goal that these calls fulfil, as a real person would",
}


def _first_sentence(text: str) -> str:
    sentence = re.split(r"(?<=[.!?])\s|\n", text.strip(), maxsplit=1)[0].rstrip(".")
    return sentence[:1].lower() + sentence[1:]


def _value_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def template_request(graph: ToolGraph, env: str, tool: str, arguments: dict[str, Any]) -> str:
    """One call as a plain request: the tool's purpose and the values a user would say."""
    node_id = tool_id(env, tool)
    inputs = [graph.node(param) for param in graph.inputs(node_id)]
    return describe_request(tool, graph.node(node_id)["description"], inputs, arguments)


def describe_request(
    tool: str, description: str, inputs: list[dict[str, Any]], arguments: dict[str, Any]
) -> str:
    """The request for one call of `tool` (its `description`), from its input parameters (each with
    ``path``, ``name``, ``user_providable``): the values a user says, the rest referred to."""
    details, references = [], []
    for node in inputs:
        top = node["path"][0]
        if top not in arguments:
            continue
        if len(node["path"]) > 1 and node["path"][1] != node["name"]:
            continue
        value = arguments[top]
        if len(node["path"]) > 1:
            items = value if isinstance(value, list) else [value]
            value = ", ".join(_value_text(i.get(node["path"][1])) for i in items if isinstance(i, dict))
        if node["user_providable"]:
            details.append(f"{humanize(node['name'])}: {_value_text(value)}")
        else:
            what = humanize(re.sub(r"_ids?$", "", node["name"])) or "item"
            references.append(f"the {what} from before")
    text = _first_sentence(description) or humanize(tool)
    parts = []
    if references:
        parts.append("for " + " and ".join(dict.fromkeys(references)))
    if details:
        parts.append("(" + "; ".join(details) + ")")
    return " ".join([text, *parts])


def template_query(graph: ToolGraph, calls: list[dict[str, Any]]) -> str:
    """A turn's query from its calls, e.g. 'Please find contacts ... (query: Ada). Then get one contact's details ...'."""
    requests = [template_request(graph, c["env"], c["tool"], c["arguments"]) for c in calls]
    text = "Please " + requests[0]
    for request in requests[1:]:
        text += ". Then " + request
    return text + "."


def template_answer(calls: list[dict[str, Any]], facts: list[list[Any]] | None = None) -> str:
    """The assistant's closing message of a templated turn: the facts it must state, what the last call gave."""
    from envreg.reward.answer import render_facts

    last = calls[-1]
    result = json.dumps(last.get("result"), ensure_ascii=False, separators=(",", ":"))
    if len(result) > 300:
        result = result[:299] + "…"
    found = f" Here is what I found: {render_facts(facts)}." if facts else ""
    return f"Done.{found} {last['tool']} returned: {result}"


# -------------------------------------------------------------------------------------- QueryGen
SYSTEM = (
    "You write realistic user requests for a dataset of tool-use conversations. The tool calls "
    "were already executed in a sandbox; you only write what a user would say. Answer with JSON only."
)


def _describe_turns(turns: list[list[dict[str, Any]]]) -> str:
    lines = []
    for i, calls in enumerate(turns, 1):
        lines.append(f"Turn {i}:")
        for call in calls:
            result = json.dumps(call.get("result"), ensure_ascii=False)[:400]
            lines.append(
                f"  - {call['env']}.{call['tool']}({json.dumps(call['arguments'], ensure_ascii=False)}) -> {result}"
            )
    return "\n".join(lines)


def _check_scenario(value: Any) -> None:
    if (
        not isinstance(value, dict)
        or not isinstance(value.get("scenario"), str)
        or not value["scenario"].strip()
    ):
        raise ValueError('expected {"scenario": "..."}')


def _check_list(key: str, n: int):
    def check(value: Any) -> None:
        if not isinstance(value, dict) or not isinstance(value.get(key), list) or len(value[key]) != n:
            raise ValueError(f'expected {{"{key}": [...]}} with exactly {n} strings')
        if not all(isinstance(v, str) and v.strip() for v in value[key]):
            raise ValueError(f"every item of {key} must be a non-empty string")

    return check


async def generate_queries(
    llm, turns: list[list[dict[str, Any]]], rng: random.Random, examples: list[dict[str, Any]] | None = None
) -> dict[str, Any] | None:
    """Run the four QueryGen stages; returns {"queries", "scenario", "subgoals", "refinements"} or None.

    `examples` (from the seed pool, `envreg.synth.seeds`) are shown to the articulation stage.
    """
    from envreg.synth.llm import chat_json
    from envreg.synth.seeds import SeedPool

    described = _describe_turns(turns)
    n = len(turns)
    scenario = await chat_json(
        llm,
        SYSTEM,
        f"Executed calls:\n{described}\n\nWrite the scenario: who the user is and what they want overall. "
        'JSON: {"scenario": "..."}',
        check=_check_scenario,
    )
    if scenario is None:
        return None
    subgoals = await chat_json(
        llm,
        SYSTEM,
        f"Scenario: {scenario['scenario']}\nExecuted calls:\n{described}\n\nWrite one subgoal per turn "
        f'(what the user wants from that turn). JSON: {{"subgoals": [{n} strings]}}',
        check=_check_list("subgoals", n),
    )
    if subgoals is None:
        return None
    articulated = await chat_json(
        llm,
        SYSTEM,
        f"{SeedPool.describe(examples or [])}Scenario: {scenario['scenario']}\nSubgoals: {json.dumps(subgoals['subgoals'])}\nExecuted calls:\n{described}\n\n"
        "For each turn write the user's request: natural, first person, giving every value the user "
        "must provide (names, dates, amounts), never internal ids. "
        f'JSON: {{"queries": [{n} strings]}}',
        check=_check_list("queries", n),
    )
    if articulated is None:
        return None
    strategies = [rng.choice(REFINEMENTS) for _ in range(n)]
    guide = "\n".join(f"Turn {i + 1}: {s}: {REFINEMENT_GUIDE[s]}" for i, s in enumerate(strategies))
    refined = await chat_json(
        llm,
        SYSTEM,
        f"Requests: {json.dumps(articulated['queries'], ensure_ascii=False)}\n\nRewrite each request with its "
        f"strategy, keeping it solvable by exactly the same calls:\n{guide}\n"
        f'JSON: {{"queries": [{n} strings]}}',
        check=_check_list("queries", n),
    )
    if refined is None:
        return None
    return {
        "queries": refined["queries"],
        "articulated": articulated["queries"],
        "scenario": scenario["scenario"],
        "subgoals": subgoals["subgoals"],
        "refinements": strategies,
    }
