"""Exports of executed trajectories: the record itself, EnvFactory trajectory JSON, SFT and RL data.

Every exported record carries its provenance (environments with image and manifest digests, seed,
snapshot ids, state hashes). The formats are described in the README (Formats section):

- ``trajectories.jsonl``: `envreg.synth.records.Trajectory`, one per line (the source of the rest).
- ``envfactory/<id>.json``: EnvFactory's trajectory files (``nodes`` with ``steps``, ``initial_scenario``,
  ``final_scenario``), readable by its data-processing scripts.
- ``sft.json`` + ``dataset_info.json``: LLaMA-Factory ``sharegpt`` with ``function_call`` / ``observation``
  turns and the tools of each conversation.
- ``messages.jsonl``: the OpenAI chat flavour of the same conversations (``messages`` with assistant
  ``tool_calls`` and ``tool`` replies, ``tools``), as OpenAI fine-tuning and TRL's SFTTrainer read it.
- ``hf/``: a Hugging Face ``datasets.DatasetDict`` of those conversations (``train`` and ``test`` splits,
  explicit features) written with ``save_to_disk``; ``load_from_disk`` reads it, ``push_to_hub`` publishes it.
- ``rl.parquet``: verl rows (``data_source``, ``prompt``, ``ability``, ``reward_model``, ``extra_info``), one per
  turn, with the ground truth (the turn's calls with their results and masked arguments marked, the
  facts a read-only turn's answer must state, the oracle's answer) and each environment's state
  before and after the turn; ``verl_tools.yaml`` beside it is verl's tool config for its rows
  (`envreg.rollout.verl`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from envreg.canonical import sha256_hex
from envreg.env import states_equal
from envreg.manifest import Manifest
from envreg.reward.answer import Fact, unit_facts, with_facts
from envreg.synth.records import Trajectory, Turn, function_name

FORMATS = ("trajectories", "envfactory", "sft", "messages", "rl", "hf")
TEST_FRACTION = 0.1
SYSTEM_PROMPT = (
    "You are a helpful assistant that completes the user's requests with the tools available. "
    "Call tools when you need information or to act; answer briefly when done."
)


class ExportError(ValueError):
    """A trajectory cannot be exported as asked (unknown environment, stale manifest)."""


def dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def read_trajectories(path: Path | str) -> list[Trajectory]:
    """Records from a ``trajectories.jsonl`` file; a bad line is an error naming the line."""
    records = []
    for number, line in enumerate(Path(path).read_text().splitlines(), 1):
        if line.strip():
            try:
                records.append(Trajectory.model_validate_json(line))
            except ValueError as exc:
                raise ExportError(f"{path}:{number}: not a trajectory record: {exc}") from None
    return records


def write_trajectories(path: Path | str, trajectories: Iterable[Trajectory]) -> int:
    lines = [t.model_dump_json() for t in trajectories]
    Path(path).write_text("".join(line + "\n" for line in lines))
    return len(lines)


# ----------------------------------------------------------------------------------------- tools
def tool_specs(
    trajectory: Trajectory, manifests: dict[str, Manifest], names: list[str] | None = None
) -> list[dict[str, Any]]:
    """The OpenAI function tools of a trajectory's environments (names as `function_name` gives over
    `names`, by default the trajectory's environments), with the decoys of a distractor augmentation
    (``meta.augmentation``) listed as its rollouts list them."""
    names = names or [e.name for e in trajectory.envs]
    tools = []
    for ref in trajectory.envs:
        manifest = manifests.get(ref.name)
        if manifest is None:
            raise ExportError(
                f"{trajectory.id}: no manifest for {ref.name}: pass --manifests with {ref.name}.json"
            )
        if manifest.digest != ref.manifest_digest:
            raise ExportError(
                f"{trajectory.id} was made with {ref.name} {ref.manifest_digest[:19]}, but the manifest is "
                f"{manifest.digest[:19]}: export with the manifests it was made with"
            )
        listed = [(spec.name, spec.description, spec.input_schema) for spec in manifest.tools]
        decoys = (trajectory.meta.get("augmentation") or {}).get(ref.name, {}).get("distractors", [])
        listed += [(d["name"], d.get("description", ""), d["inputSchema"]) for d in decoys]
        for name, description, schema in listed:
            tools.append(
                {
                    "type": "function",
                    "function": {
                        "name": function_name(ref.name, name, names),
                        "description": description,
                        "parameters": schema,
                    },
                }
            )
    return tools


def _result_text(call) -> str:
    """What the agent saw of a call's result: the augmented text when there is one, else the result."""
    if call.observation is not None:
        return call.observation
    return dumps(call.result) if not isinstance(call.result, str) else call.result


def _call_json(call, envs: list[str]) -> dict[str, Any]:
    return {"name": function_name(call.env, call.tool, envs), "arguments": call.arguments}


def _states_before(trajectory: Trajectory) -> list[dict[str, dict[str, Any]]]:
    before = [trajectory.initial_states]
    for turn in trajectory.turns[:-1]:
        before.append(turn.states or before[-1])
    return before


def turn_facts(trajectory: Trajectory, turn: Turn, before: dict[str, dict[str, Any]]) -> list[Fact]:
    """What the turn's answer must state: its own facts, or those of its results when it reads only."""
    read_only = all(
        states_equal(state, turn.states.get(env, state), trajectory.volatile.get(env, []))
        for env, state in before.items()
    )
    return unit_facts(turn.facts, [c.result for c in turn.calls if not c.is_error], read_only)


def turn_answers(trajectory: Trajectory) -> list[tuple[list[Fact], str]]:
    """Per turn: its facts and the assistant's answer, completed with the facts it does not state."""
    out = []
    for turn, before in zip(trajectory.turns, _states_before(trajectory), strict=True):
        facts = turn_facts(trajectory, turn, before)
        out.append((facts, with_facts(turn.answer or "Done.", facts)))
    return out


# ------------------------------------------------------------------------------------ EnvFactory
def envfactory_record(trajectory: Trajectory) -> dict[str, Any]:
    """One trajectory in EnvFactory's file form: a node per turn, alternating input and output steps."""
    envs = [e.name for e in trajectory.envs]
    nodes = []
    answers = turn_answers(trajectory)
    for turn, before, (_, answer) in zip(trajectory.turns, _states_before(trajectory), answers, strict=True):
        steps: list[dict[str, Any]] = [{"role": "user", "content": turn.query}]
        for call in turn.calls:
            steps.append(
                {
                    "role": "tool_call",
                    "content": [{**_call_json(call, envs), "masked_arguments": call.masked}],
                }
            )
            steps.append({"role": "tool_response", "content": [_result_text(call)]})
        steps.append({"role": "assistant", "content": answer})
        nodes.append(
            {
                "query": turn.query,
                "decision": True,
                "mcp_servers": envs,
                "steps": steps,
                "initial_scenario": before,
                "final_scenario": turn.states,
            }
        )
    return {"seed": trajectory.seed, "user_tools": [], "nodes": nodes, "envreg": trajectory.provenance()}


# ------------------------------------------------------------------------------------------- SFT
def _messages_to_sharegpt(messages: list[dict[str, Any]]) -> list[dict[str, str]]:
    """An LLM-solved turn (OpenAI chat messages) as sharegpt turns; parallel results share one observation."""
    out: list[dict[str, str]] = []
    pending: list[str] = []

    def flush() -> None:
        if pending:
            out.append({"from": "observation", "value": pending[0] if len(pending) == 1 else dumps(pending)})
            pending.clear()

    for message in _solved_messages(messages):  # malformed calls and their error replies are not targets
        if message["role"] == "tool":
            pending.append(message["content"])
            continue
        flush()
        if message.get("tool_calls"):
            calls = [
                {"name": c["function"]["name"], "arguments": json.loads(c["function"]["arguments"])}
                for c in message["tool_calls"]
            ]
            out.append({"from": "function_call", "value": dumps(calls[0] if len(calls) == 1 else calls)})
        else:
            out.append(
                {"from": "gpt" if message["role"] == "assistant" else "human", "value": message["content"]}
            )
    flush()
    return out


def sft_record(trajectory: Trajectory, manifests: dict[str, Manifest]) -> dict[str, Any]:
    """A LLaMA-Factory sharegpt conversation with tool calls (``human``/``function_call``/``observation``/``gpt``)."""
    envs = [e.name for e in trajectory.envs]
    conversation: list[dict[str, str]] = []
    for turn, (_, answer) in zip(trajectory.turns, turn_answers(trajectory), strict=True):
        conversation.append({"from": "human", "value": turn.query})
        if turn.messages:
            conversation += _messages_to_sharegpt(turn.messages)
            if conversation[-1]["from"] != "gpt":
                conversation.append({"from": "gpt", "value": answer})
            continue
        for call in turn.calls:
            conversation.append({"from": "function_call", "value": dumps(_call_json(call, envs))})
            conversation.append({"from": "observation", "value": _result_text(call)})
        conversation.append({"from": "gpt", "value": answer})
    tools = [t["function"] for t in tool_specs(trajectory, manifests)]
    return {
        "conversations": conversation,
        "system": SYSTEM_PROMPT,
        "tools": dumps(tools),
        "envreg": trajectory.provenance(),
    }


# --------------------------------------------------------------------------------- OpenAI messages
def _openai_call(call_id: str, name: str, arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": dumps(arguments)}}


def _solved_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """An LLM-solved turn's messages as training data: malformed calls and their error replies left out."""
    out: list[dict[str, Any]] = []
    dropped: set[str] = set()
    for message in messages:
        role = message.get("role")
        if role == "tool":
            if message.get("tool_call_id") not in dropped:
                out.append(
                    {
                        "role": "tool",
                        "tool_call_id": message["tool_call_id"],
                        "content": message.get("content") or "",
                    }
                )
            continue
        if role == "assistant" and message.get("tool_calls"):
            calls = []
            for call in message["tool_calls"]:
                try:
                    arguments = json.loads(call["function"]["arguments"] or "{}")
                except ValueError:
                    dropped.add(call.get("id", ""))
                    continue
                calls.append(_openai_call(call["id"], call["function"]["name"], arguments))
            if calls:
                out.append(
                    {"role": "assistant", "content": message.get("content") or None, "tool_calls": calls}
                )
        elif role in ("assistant", "user"):
            out.append({"role": role, "content": message.get("content") or ""})
    return out


def messages_record(trajectory: Trajectory, manifests: dict[str, Manifest]) -> dict[str, Any]:
    """One conversation in OpenAI chat form: ``messages`` (system, user, assistant ``tool_calls``, ``tool``
    replies with their ``tool_call_id``), the ``tools`` the model had, and provenance."""
    envs = [e.name for e in trajectory.envs]
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM_PROMPT}]
    for k, (turn, (_, answer)) in enumerate(zip(trajectory.turns, turn_answers(trajectory), strict=True)):
        messages.append({"role": "user", "content": turn.query})
        if turn.messages:
            messages += _solved_messages(turn.messages)
            if messages[-1]["role"] != "assistant" or messages[-1].get("tool_calls"):
                messages.append({"role": "assistant", "content": answer})
            continue
        for i, call in enumerate(turn.calls):
            call_id = f"call_{k}_{i}"
            name = function_name(call.env, call.tool, envs)
            messages.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [_openai_call(call_id, name, call.arguments)],
                }
            )
            messages.append({"role": "tool", "tool_call_id": call_id, "content": _result_text(call)})
        messages.append({"role": "assistant", "content": answer})
    return {
        "messages": messages,
        "tools": tool_specs(trajectory, manifests),
        "envreg": trajectory.provenance(),
    }


def hf_dataset(
    trajectories: Sequence[Trajectory], manifests: dict[str, Manifest], test_fraction: float = TEST_FRACTION
):
    """A `datasets.DatasetDict` (``train``, ``test``) of the conversations in OpenAI chat form.

    A trajectory's split follows from its id (the same record always lands in the same split).
    Columns: ``id``, ``messages``, ``tools`` and ``provenance`` (JSON text: tool schemas differ from
    one row to the next, which Arrow columns cannot hold), ``envs``, ``query_source``.
    """
    import datasets

    call = {"id": datasets.Value("string"), "type": datasets.Value("string")}
    call["function"] = {"name": datasets.Value("string"), "arguments": datasets.Value("string")}
    features = datasets.Features(
        {
            "id": datasets.Value("string"),
            "messages": [
                {
                    "role": datasets.Value("string"),
                    "content": datasets.Value("string"),
                    "tool_calls": [call],
                    "tool_call_id": datasets.Value("string"),
                }
            ],
            "tools": datasets.Value("string"),
            "envs": [datasets.Value("string")],
            "query_source": datasets.Value("string"),
            "provenance": datasets.Value("string"),
        }
    )
    splits: dict[str, list[dict[str, Any]]] = {"train": [], "test": []}
    for t in trajectories:
        record = messages_record(t, manifests)
        row = {
            "id": t.id,
            "messages": [
                {
                    "role": m["role"],
                    "content": m.get("content"),
                    "tool_calls": m.get("tool_calls") or [],
                    "tool_call_id": m.get("tool_call_id"),
                }
                for m in record["messages"]
            ],
            "tools": dumps(record["tools"]),
            "envs": [e.name for e in t.envs],
            "query_source": t.query_source,
            "provenance": dumps(record["envreg"]),
        }
        in_test = int(sha256_hex(t.id)[:8], 16) / 16**8 < test_fraction
        splits["test" if in_test else "train"].append(row)
    columns = {name: {k: [row[k] for row in rows] for k in features} for name, rows in splits.items()}
    return datasets.DatasetDict(
        {name: datasets.Dataset.from_dict(data, features=features) for name, data in columns.items()}
    )


DATASET_INFO = {
    "envreg_sft": {
        "file_name": "sft.json",
        "formatting": "sharegpt",
        "columns": {"messages": "conversations", "system": "system", "tools": "tools"},
    }
}


# -------------------------------------------------------------------------------------------- RL
def _history(turn, envs: list[str], answer: str) -> list[dict[str, str]]:
    messages = [{"role": "user", "content": turn.query}]
    for call in turn.calls:
        messages.append(
            {"role": "assistant", "content": f"<tool_call>\n{dumps(_call_json(call, envs))}\n</tool_call>"}
        )
        messages.append({"role": "tool", "content": _result_text(call)})
    messages.append({"role": "assistant", "content": answer})
    return messages


def rl_rows(
    trajectory: Trajectory,
    manifests: dict[str, Manifest],
    start_index: int = 0,
    split: str = "train",
    names: list[str] | None = None,
) -> list[dict[str, Any]]:
    """verl rows, one per turn: the prompt is the conversation so far and the turn's query.

    The ground truth is ``{"calls", "facts", "answer"}``: the turn's oracle calls with their results,
    what a read-only turn's answer must state, and the oracle's answer. Tools are named over `names`
    (default: the trajectory's environments; `export` gives every environment of the file, so that
    one verl tool config serves all its rows). ``extra_info`` also carries what verl's ``tool_agent``
    loop reads: ``tools_kwargs`` (the row's task, for `envreg.rollout.verl.EnvregTool`),
    ``interaction_kwargs`` and ``tool_selection``.
    """
    from envreg.rollout.verl_config import row_kwargs

    envs = [e.name for e in trajectory.envs]
    naming = names or envs
    tools = tool_specs(trajectory, manifests, naming)
    rows = []
    history: list[dict[str, str]] = [{"role": "system", "content": SYSTEM_PROMPT}]
    answers = turn_answers(trajectory)
    for k, (turn, before) in enumerate(zip(trajectory.turns, _states_before(trajectory), strict=True)):
        facts, answer = answers[k]
        calls = [
            {
                **_call_json(c, naming),
                "masked_arguments": c.masked,
                "env": c.env,
                "tool": c.tool,
                "is_error": c.is_error,
                "result": c.result,
            }
            for c in turn.calls
        ]
        ground_truth = {"calls": calls, "facts": facts, "answer": answer}
        before_hash = trajectory.initial_state_sha256 if k == 0 else trajectory.turns[k - 1].state_sha256
        rows.append(
            {
                "data_source": "envreg",
                "agent_name": "tool_agent",
                "prompt": [*history, {"role": "user", "content": turn.query}],
                "ability": "tool_use",
                "reward_model": {"style": "rule", "ground_truth": dumps(ground_truth)},
                "extra_info": {
                    "index": start_index + k,
                    "split": split,
                    "trajectory_id": trajectory.id,
                    "turn": k,
                    "envs": dumps(envs),
                    "tools": dumps(tools),
                    "initial_states": dumps(before),
                    "final_states": dumps(turn.states),
                    "initial_state_sha256": dumps(before_hash),
                    "final_state_sha256": dumps(turn.state_sha256),
                    "volatile": dumps(trajectory.volatile),
                    "augmentation": dumps(trajectory.meta.get("augmentation") or {}),
                    "provenance": dumps(trajectory.provenance()),
                },
            }
        )
        rows[-1]["extra_info"].update(row_kwargs(rows[-1]))
        history += _history(turn, naming, answer)
    return rows


# -------------------------------------------------------------------------------------- writing
def export(
    trajectories: Sequence[Trajectory],
    out: Path | str,
    manifests: dict[str, Manifest],
    formats: Sequence[str] = FORMATS,
    test_fraction: float = TEST_FRACTION,
) -> dict[str, Path]:
    """Write the asked formats under `out`; returns {format: path}. `test_fraction`: of the ``hf`` export."""
    unknown = set(formats) - set(FORMATS)
    if unknown:
        raise ExportError(f"unknown format {', '.join(sorted(unknown))}; choose from {', '.join(FORMATS)}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written: dict[str, Path] = {}
    if "trajectories" in formats:
        write_trajectories(out / "trajectories.jsonl", trajectories)
        written["trajectories"] = out / "trajectories.jsonl"
    if "envfactory" in formats:
        folder = out / "envfactory"
        folder.mkdir(exist_ok=True)
        for t in trajectories:
            (folder / f"{t.id}.json").write_text(
                json.dumps(envfactory_record(t), ensure_ascii=False, indent=1)
            )
        written["envfactory"] = folder
    if "sft" in formats:
        records = [sft_record(t, manifests) for t in trajectories]
        (out / "sft.json").write_text(json.dumps(records, ensure_ascii=False, indent=1))
        (out / "dataset_info.json").write_text(json.dumps(DATASET_INFO, indent=1))
        written["sft"] = out / "sft.json"
    if "messages" in formats:
        lines = [dumps(messages_record(t, manifests)) for t in trajectories]
        (out / "messages.jsonl").write_text("".join(line + "\n" for line in lines))
        written["messages"] = out / "messages.jsonl"
    if "hf" in formats:
        import datasets

        bars = datasets.is_progress_bar_enabled()
        datasets.disable_progress_bars()
        try:
            hf_dataset(trajectories, manifests, test_fraction).save_to_disk(str(out / "hf"))
        finally:
            if bars:
                datasets.enable_progress_bars()
        written["hf"] = out / "hf"
    if "rl" in formats:
        import pyarrow as pa
        import pyarrow.parquet as pq

        from envreg.rollout.verl_config import write_tool_config

        names = sorted({e.name for t in trajectories for e in t.envs})
        rows: list[dict[str, Any]] = []
        for t in trajectories:
            rows += rl_rows(t, manifests, start_index=len(rows), names=names)
        pq.write_table(pa.Table.from_pylist(rows), out / "rl.parquet")
        written["rl"] = out / "rl.parquet"
        written["verl_tools"] = write_tool_config(
            out / "verl_tools.yaml", [manifests[n] for n in names], names=names
        )
    return written
