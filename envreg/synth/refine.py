"""The LLM's part in building the graph (optional): marking user-providable inputs and refining edges.

Both ask for JSON per environment, check it, retry, and keep the rules' or the embeddings' answer
for anything the model did not answer validly.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from envreg.synth.llm import LLMConfig, chat_json
from envreg.synth.params import Param

SYSTEM = "You analyse tool APIs for a data pipeline. Answer with JSON only."


def _indexed_check(n: int, kind: type):
    def check(value: Any) -> None:
        if not isinstance(value, dict):
            raise ValueError("expected a JSON object keyed by the numbers")
        for key, item in value.items():
            if not str(key).isdigit() or not 0 <= int(key) < n:
                raise ValueError(f"unknown number {key!r}: use 0..{n - 1}")
            if kind is bool and not isinstance(item, bool):
                raise ValueError(f"{key}: expected true or false")
            if kind is list and not (isinstance(item, list) and all(isinstance(i, int) for i in item)):
                raise ValueError(f"{key}: expected a list of candidate numbers")
        if kind is bool and len(value) != n:
            raise ValueError(f"answer every one of the {n} parameters")

    return check


async def mark_user_providable(llm: LLMConfig, params: list[Param], graph) -> dict[str, bool]:
    """Ask, per environment, which inputs a user could say; {param key: bool} for valid answers."""
    by_env: dict[str, list[Param]] = defaultdict(list)
    for p in params:
        by_env[p.env].append(p)
    marks: dict[str, bool] = {}
    for env, items in sorted(by_env.items()):
        lines = [
            f"{i}: {p.tool}.{'.'.join(p.path)} ({p.type}): {p.description or '-'} [tool: {graph.nodes[p.key]['tool_id']}]"
            for i, p in enumerate(items)
        ]
        prompt = (
            f"Environment {env}. For each input parameter say whether a user could provide its value "
            "(names, dates, amounts, emails, free text, choices: true) or whether it must come from an "
            "earlier tool result (internal ids: false).\n"
            + "\n".join(lines)
            + '\nJSON: {"0": true, "1": false, ...}'
        )
        answer = await chat_json(llm, SYSTEM, prompt, check=_indexed_check(len(items), bool))
        if answer is not None:
            for key, value in answer.items():
                marks[items[int(key)].key] = value
    return marks


async def refine_edges(
    llm: LLMConfig,
    candidates: dict[str, list[tuple[Param, float]]],
    accepted: dict[str, list[tuple[Param, float, str]]],
    graph,
) -> dict[str, list[tuple[Param, float, str]]]:
    """Ask, per environment, which candidate outputs really feed each input; keeps the rest as it was."""
    by_env: dict[str, list[str]] = defaultdict(list)
    for key in sorted(candidates):
        by_env[graph.nodes[key]["env"]].append(key)
    refined = dict(accepted)
    for env, keys in sorted(by_env.items()):
        lines = []
        for i, key in enumerate(keys):
            node = graph.nodes[key]
            options = "; ".join(
                f"[{j}] {o.env}.{o.tool} -> {'.'.join(o.path)} (similarity {s:.2f})"
                for j, (o, s) in enumerate(candidates[key])
            )
            lines.append(
                f"{i}: {node['tool']}.{'.'.join(node['path'])}: {node['description'] or '-'}\n   candidates: {options}"
            )
        prompt = (
            f"Environment {env}. For each input, list the candidate outputs whose value can be passed to "
            "it as is (same entity, same meaning).\n"
            + "\n".join(lines)
            + '\nJSON: {"0": [0, 2], "1": [], ...}'
        )
        answer = await chat_json(llm, SYSTEM, prompt, check=_indexed_check(len(keys), list))
        if answer is None:
            continue
        for index, chosen in answer.items():
            key = keys[int(index)]
            options = candidates[key]
            refined[key] = [
                (options[j][0], options[j][1], "llm") for j in sorted(set(chosen)) if 0 <= j < len(options)
            ]
    return refined
