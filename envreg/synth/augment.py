"""COVERT stage 2 on trajectory records: one verified variant per record and augmentation family.

Families (`FAMILIES`):

- ``distractors``: decoy tools of other environments listed with the real ones (`--overlap` high,
  medium or low: how much the decoys look like the real tools; `envreg.reward.augment`);
- ``formats``: tool results in YAML, XML or markdown; ``noise``: irrelevant fields added to results;
- ``errors``: a call's first attempt in a turn fails with a transient error, and the record shows the
  failed attempt and its retry (labelled ``injected_error``); each turn is a session of its own, as
  its RL row's rollouts are;
- ``rewrite``: an LLM rewrites each turn's request at an indirection level (1 paraphrase, 2 refer to
  values earlier turns produced, 3 say the goal), kept only where the same calls still answer it;
- ``problematic``: an LLM leaves out a value the user must give; the turn's right answer is to ask
  for it (no call), which the turn's facts require of the answer.

Every variant is verified before it is kept. The runtime families (distractors, formats, noise,
errors) replay the oracle's calls under the augmentation in a sandbox, retrying injected errors:
every result must read back as the oracle's and every turn must end in the oracle's state. Judged
kinds carry their label only when the LLM judge confirms it: an injected error is a transient
failure a retry fixes (when an LLM is configured), a problematic query cannot be done without asking
(always: no LLM, no problematic variant). A variant that fails is reported with the reason, never kept.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from envreg.canonical import canonical_json, sha256_hex
from envreg.env import states_equal
from envreg.env.augment import Augmentation, Format
from envreg.reward.augment import Overlap, Similarity, augmentation_for, query_values, rewrite_queries
from envreg.reward.match import result_obtained
from envreg.synth.params import humanize, input_params
from envreg.synth.records import ExecutedCall, Trajectory, Turn
from envreg.synth.verify import ask_judge

FAMILIES = ("distractors", "formats", "noise", "errors", "rewrite", "problematic")
RUNTIME_FAMILIES = ("distractors", "formats", "noise", "errors")
NEEDS_LLM = ("rewrite", "problematic")
LEAVE_OUT = (
    'Rewrite the user\'s request so that it no longer gives the {what} ("{value}"): the user forgot to '
    'say it. Keep everything else. JSON: {{"query": "..."}}'
)


@dataclass
class AugmentOptions:
    """How each family is applied; everything derives from `seed` (and each record's id)."""

    seed: int = 0
    distractors: int = 3
    overlap: Overlap = "medium"
    formats: list[Format] = field(default_factory=lambda: ["yaml", "xml", "markdown"])
    noise: float = 1.0
    errors: float = 0.5
    indirection: int = 1
    catalog: dict[str, list[dict[str, Any]]] | None = None
    embed: Similarity = "graph"


@dataclass
class Variant:
    """One record under one family: the verified record, or why there is none."""

    family: str
    source: str
    record: Trajectory | None = None
    reason: str = ""


def variant_seed(seed: int, *parts: str) -> int:
    return int(sha256_hex(":".join([str(seed), *parts]))[:8], 16)


def runtime_config(env: str, family: str, options: AugmentOptions, seed: int) -> Augmentation:
    """The augmentation of one environment's sandbox for a runtime family."""
    knobs: dict[str, Any] = {
        "distractors": {"distractors": options.distractors, "overlap": options.overlap},
        "formats": {"formats": options.formats},
        "noise": {"noise": options.noise},
        "errors": {"errors": options.errors},
    }[family]
    return augmentation_for(env, seed=seed, catalog=options.catalog, embed=options.embed, **knobs)


async def augment_records(
    rt,
    records: list[Trajectory],
    families: list[str],
    options: AugmentOptions,
    llm=None,
    isolation: str = "local",
) -> list[Variant]:
    """Every record under every family, verified; raises `ValueError` for an unknown family or one that
    needs an LLM when none is configured."""
    unknown = sorted(set(families) - set(FAMILIES))
    if unknown:
        raise ValueError(f"unknown family {', '.join(unknown)}; choose from {', '.join(FAMILIES)}")
    if llm is None and (need := [f for f in families if f in NEEDS_LLM]):
        raise ValueError(f"{', '.join(need)} needs an LLM: configure an OpenAI-compatible endpoint")
    variants = []
    for record in records:
        for family in families:
            try:
                if family in RUNTIME_FAMILIES:
                    variant = await _runtime_variant(rt, record, family, options, llm, isolation)
                elif family == "rewrite":
                    variant = await _rewrite_variant(record, options, llm)
                else:
                    variant = await _problematic_variant(record, options, llm)
            except (ValueError, LookupError) as exc:
                variant = Variant(family, record.id, reason=str(exc))
            variants.append(variant)
    return variants


def _variant_id(record: Trajectory, family: str) -> str:
    return f"{record.id}.{family}"


# runtime families ------------------------------------------------------------------------------
async def _runtime_variant(
    rt, record: Trajectory, family: str, options: AugmentOptions, llm, isolation
) -> Variant:
    configs = {
        e.name: runtime_config(e.name, family, options, variant_seed(options.seed, record.id, e.name, family))
        for e in record.envs
    }
    sandboxes: dict[str, Any] = {}
    try:
        for env, config in configs.items():
            sandboxes[env] = await rt.sandbox(
                env, isolation=isolation, state=record.initial_states[env], augment=config
            )
        turns, labels = [], []
        for k, turn in enumerate(record.turns):
            if (
                k
            ):  # each turn is a session of its own, as its RL row is: a call's first attempt in it may fail
                for env, config in configs.items():
                    await sandboxes[env].augment(config)
            calls: list[ExecutedCall] = []
            for call in turn.calls:
                sandbox = sandboxes[call.env]
                result = await sandbox.call_tool(call.tool, call.arguments)
                label = (await sandbox.augmentation_labels())[-1]
                if (
                    label.get("kind") == "injected_error"
                ):  # the record shows the failed attempt, then the retry
                    calls.append(
                        call.model_copy(update={"result": result.text, "is_error": True, "observation": None})
                    )
                    labels.append({**label, "turn": k, "call": len(calls) - 1, "tool": call.tool})
                    result = await sandbox.call_tool(call.tool, call.arguments)
                    label = (await sandbox.augmentation_labels())[-1]
                if result.is_error != call.is_error or (
                    not call.is_error
                    and not result_obtained(
                        call.result, result.value, result.rendered, label.get("noise", [])
                    )
                ):
                    return Variant(
                        family, record.id, reason=f"turn {k}: {call.tool}'s result changed under {family}"
                    )
                reshaped = "format" in label or "noise" in label
                calls.append(call.model_copy(update={"observation": result.text if reshaped else None}))
                if reshaped:
                    labels.append({**label, "turn": k, "call": len(calls) - 1, "tool": call.tool})
            for env, sandbox in sandboxes.items():
                if not states_equal(
                    await sandbox.state(), turn.states.get(env), record.volatile.get(env, [])
                ):
                    return Variant(
                        family, record.id, reason=f"turn {k}: the state of {env} is not the oracle's"
                    )
            turns.append(turn.model_copy(update={"calls": calls}))
    finally:
        for sandbox in sandboxes.values():
            await sandbox.close()
    if family == "errors":
        failed = [label for label in labels if label.get("kind") == "injected_error"]
        if not failed:
            return Variant(family, record.id, reason="no call's first attempt was failed (raise --errors)")
        if llm is not None:
            for label in failed:
                text = next(c.result for c in turns[label["turn"]].calls[label["call"] : label["call"] + 1])
                verdict = await ask_judge(
                    llm,
                    f"A tool call ({label['tool']}) answered: {text}\n\nIs this a transient failure after which "
                    "the same call can simply be made again (nothing was done)?",
                )
                if verdict is None or not verdict[0]:
                    reason = "no verdict" if verdict is None else verdict[1]
                    return Variant(
                        family, record.id, reason=f"the judge did not confirm the error label: {reason}"
                    )
                label["judged"] = True
    if family in ("formats", "noise") and not labels:
        return Variant(family, record.id, reason=f"{family} reshaped no result")
    meta = {
        **record.meta,
        "augmentation": {env: config.model_dump(mode="json") for env, config in configs.items()},
        "augmentation_labels": {**record.meta.get("augmentation_labels", {}), "calls": labels},
        "augmented_from": record.id,
        "augmentation_family": family,
    }
    return Variant(
        family,
        record.id,
        record.model_copy(update={"id": _variant_id(record, family), "turns": turns, "meta": meta}),
    )


# LLM families ----------------------------------------------------------------------------------
async def _rewrite_variant(record: Trajectory, options: AugmentOptions, llm) -> Variant:
    rewritten = await rewrite_queries(record, llm, options.indirection)
    labels = rewritten.meta["augmentation_labels"]["queries"]
    if not any(label["kind"] == "rewritten" for label in labels):
        reasons = "; ".join(sorted({label.get("reason", "") for label in labels}))
        return Variant("rewrite", record.id, reason=f"no turn was rewritten ({reasons})")
    meta = {**rewritten.meta, "augmented_from": record.id, "augmentation_family": "rewrite"}
    return Variant(
        "rewrite",
        record.id,
        rewritten.model_copy(update={"id": _variant_id(record, "rewrite"), "meta": meta}),
    )


def _user_values(record: Trajectory, turn: Turn) -> list[tuple[str, str]]:
    """(parameter, value) pairs of the turn's calls that a user gives and the query spells out."""
    from envreg.env import load_environment

    pairs = []
    for call in turn.calls:
        if call.is_error:
            continue
        wire = next(t for t in load_environment(call.env).list_tools() if t["name"] == call.tool)
        for param in input_params(call.env, wire):
            value = call.arguments.get(param.path[0])
            if (
                len(param.path) == 1
                and param.user_providable
                and value is not None
                and not isinstance(value, bool)
            ):
                text = value if isinstance(value, str) else json.dumps(value)
                if query_values(turn.query, [text]):
                    pairs.append((param.name, text))
    return pairs


async def _problematic_variant(record: Trajectory, options: AugmentOptions, llm) -> Variant:
    from envreg.synth.llm import chat_json

    def check(value: Any) -> None:
        if (
            not isinstance(value, dict)
            or not isinstance(value.get("query"), str)
            or not value["query"].strip()
        ):
            raise ValueError('expected {"query": "<text>"}')

    order = sorted(
        range(len(record.turns)), key=lambda k: variant_seed(options.seed, record.id, "problem", str(k))
    )
    for k in order:
        turn = record.turns[k]
        for param, value in _user_values(record, turn):
            answer = await chat_json(
                llm, "You edit user requests for a dataset. Answer with JSON only.",
                f"Request: {turn.query}\n\n" + LEAVE_OUT.format(what=humanize(param), value=value), check,
            )  # fmt: skip
            if answer is None or value.lower() in answer["query"].lower():
                continue
            query = answer["query"].strip()
            verdict = await ask_judge(
                llm,
                f"User request: {query}\n\nTo do it, the assistant calls {', '.join(c.tool for c in turn.calls)}, "
                f"which need the {humanize(param)}. Must the assistant ask the user for the {humanize(param)} "
                "before it can do this (ok = true), or does the request say it (ok = false)?",
            )
            if verdict is None or not verdict[0]:
                continue
            return Variant(
                "problematic", record.id, _problem_record(record, k, query, param, value, verdict[1])
            )
    return Variant(
        "problematic", record.id, reason="no turn could be made problematic with the judge's agreement"
    )


def _problem_record(
    record: Trajectory, k: int, query: str, param: str, value: str, reason: str
) -> Trajectory:
    """The record up to turn `k`, whose request now lacks `param`: the right answer asks for it."""
    before = record.initial_states if k == 0 else record.turns[k - 1].states
    what = humanize(param)
    turn = Turn(
        query=query,
        calls=[],
        state_sha256={env: sha256_hex(canonical_json(state)) for env, state in before.items()},
        states=before,
        answer=f"Before I go ahead: which {what} should I use?",
        facts=[[what, param]],
    )
    label = {
        "turn": k,
        "kind": "problematic_query",
        "problem": "missing_info",
        "missing": param,
        "value": value,
        "original": record.turns[k].query,
        "judged": True,
        "reason": reason,
    }
    meta = {
        **record.meta,
        "augmentation_labels": {**record.meta.get("augmentation_labels", {}), "queries": [label]},
        "augmented_from": record.id,
        "augmentation_family": "problematic",
    }
    return record.model_copy(
        update={
            "id": _variant_id(record, "problematic"),
            "turns": [*record.turns[:k], turn],
            "final_states": before,
            "final_state_sha256": dict(turn.state_sha256),
            "meta": meta,
        }
    )
