"""Exports of executed trajectories: the record itself, EnvFactory trajectory JSON, SFT and RL data.

Every exported record carries its provenance (environments with image and manifest digests, seed,
snapshot ids, state hashes). The formats are described in the README (Formats section):

- ``trajectories.jsonl``: `envreg.synth.records.Trajectory`, one per line (the source of the rest).
- ``envfactory/<id>.json``: EnvFactory's trajectory files (``nodes`` with ``steps``, ``initial_scenario``,
  ``final_scenario``), readable by its data-processing scripts.
- ``sft.json`` + ``dataset_info.json``: LLaMA-Factory ``sharegpt`` with ``function_call`` / ``observation``
  turns and the tools of each conversation.
- ``rl.parquet``: verl rows (``data_source``, ``prompt``, ``ability``, ``reward_model``, ``extra_info``), one per
  turn, with the ground-truth calls (masked arguments marked) and each environment's state before and
  after the turn; ``verl_tools.yaml`` beside it is verl's tool config for its rows (`envreg.rollout.verl`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from envreg.manifest import Manifest
from envreg.synth.records import Trajectory, function_name

FORMATS = ("trajectories", "envfactory", "sft", "rl")
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
    `names`, by default the trajectory's environments)."""
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
        for spec in manifest.tools:
            tools.append(
                {
                    "type": "function",
                    "function": {
                        "name": function_name(ref.name, spec.name, names),
                        "description": spec.description,
                        "parameters": spec.input_schema,
                    },
                }
            )
    return tools


def _result_text(call) -> str:
    return dumps(call.result) if not isinstance(call.result, str) else call.result


def _call_json(call, envs: list[str]) -> dict[str, Any]:
    return {"name": function_name(call.env, call.tool, envs), "arguments": call.arguments}


def _states_before(trajectory: Trajectory) -> list[dict[str, dict[str, Any]]]:
    before = [trajectory.initial_states]
    for turn in trajectory.turns[:-1]:
        before.append(turn.states or before[-1])
    return before


# ------------------------------------------------------------------------------------ EnvFactory
def envfactory_record(trajectory: Trajectory) -> dict[str, Any]:
    """One trajectory in EnvFactory's file form: a node per turn, alternating input and output steps."""
    envs = [e.name for e in trajectory.envs]
    nodes = []
    for turn, before in zip(trajectory.turns, _states_before(trajectory), strict=True):
        steps: list[dict[str, Any]] = [{"role": "user", "content": turn.query}]
        for call in turn.calls:
            steps.append(
                {
                    "role": "tool_call",
                    "content": [{**_call_json(call, envs), "masked_arguments": call.masked}],
                }
            )
            steps.append({"role": "tool_response", "content": [_result_text(call)]})
        steps.append({"role": "assistant", "content": turn.answer or "Done."})
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

    dropped: set[str] = set()  # malformed calls and their error replies are not training targets
    for message in messages:
        role = message.get("role")
        if role == "tool":
            if message.get("tool_call_id") not in dropped:
                pending.append(message.get("content") or "")
            continue
        flush()
        if role == "assistant" and message.get("tool_calls"):
            calls = []
            for call in message["tool_calls"]:
                try:
                    arguments = json.loads(call["function"]["arguments"] or "{}")
                except ValueError:
                    dropped.add(call.get("id", ""))
                    continue
                calls.append({"name": call["function"]["name"], "arguments": arguments})
            if calls:
                out.append({"from": "function_call", "value": dumps(calls[0] if len(calls) == 1 else calls)})
        elif role == "assistant":
            out.append({"from": "gpt", "value": message.get("content") or ""})
        elif role == "user":
            out.append({"from": "human", "value": message.get("content") or ""})
    flush()
    return out


def sft_record(trajectory: Trajectory, manifests: dict[str, Manifest]) -> dict[str, Any]:
    """A LLaMA-Factory sharegpt conversation with tool calls (``human``/``function_call``/``observation``/``gpt``)."""
    envs = [e.name for e in trajectory.envs]
    conversation: list[dict[str, str]] = []
    for turn in trajectory.turns:
        conversation.append({"from": "human", "value": turn.query})
        if turn.messages:
            conversation += _messages_to_sharegpt(turn.messages)
            if conversation[-1]["from"] != "gpt":
                conversation.append({"from": "gpt", "value": turn.answer or "Done."})
            continue
        for call in turn.calls:
            conversation.append({"from": "function_call", "value": dumps(_call_json(call, envs))})
            conversation.append({"from": "observation", "value": _result_text(call)})
        conversation.append({"from": "gpt", "value": turn.answer or "Done."})
    tools = [t["function"] for t in tool_specs(trajectory, manifests)]
    return {
        "conversations": conversation,
        "system": SYSTEM_PROMPT,
        "tools": dumps(tools),
        "envreg": trajectory.provenance(),
    }


DATASET_INFO = {
    "envreg_sft": {
        "file_name": "sft.json",
        "formatting": "sharegpt",
        "columns": {"messages": "conversations", "system": "system", "tools": "tools"},
    }
}


# -------------------------------------------------------------------------------------------- RL
def _history(turn, envs: list[str]) -> list[dict[str, str]]:
    messages = [{"role": "user", "content": turn.query}]
    for call in turn.calls:
        messages.append(
            {"role": "assistant", "content": f"<tool_call>\n{dumps(_call_json(call, envs))}\n</tool_call>"}
        )
        messages.append({"role": "tool", "content": _result_text(call)})
    messages.append({"role": "assistant", "content": turn.answer or "Done."})
    return messages


def rl_rows(
    trajectory: Trajectory,
    manifests: dict[str, Manifest],
    start_index: int = 0,
    split: str = "train",
    names: list[str] | None = None,
) -> list[dict[str, Any]]:
    """verl rows, one per turn: the prompt is the conversation so far and the turn's query.

    Tools are named over `names` (default: the trajectory's environments; `export` gives every
    environment of the file, so that one verl tool config serves all its rows). ``extra_info`` also
    carries what verl's ``tool_agent`` loop reads: ``tools_kwargs`` (the row's task, for
    `envreg.rollout.verl.EnvregTool`), ``interaction_kwargs`` and ``tool_selection``.
    """
    from envreg.rollout.verl_config import row_kwargs

    envs = [e.name for e in trajectory.envs]
    naming = names or envs
    tools = tool_specs(trajectory, manifests, naming)
    rows = []
    history: list[dict[str, str]] = [{"role": "system", "content": SYSTEM_PROMPT}]
    for k, (turn, before) in enumerate(zip(trajectory.turns, _states_before(trajectory), strict=True)):
        ground_truth = [
            {**_call_json(c, naming), "masked_arguments": c.masked, "env": c.env, "tool": c.tool}
            for c in turn.calls
        ]
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
                    "provenance": dumps(trajectory.provenance()),
                },
            }
        )
        rows[-1]["extra_info"].update(row_kwargs(rows[-1]))
        history += _history(turn, naming)
    return rows


# -------------------------------------------------------------------------------------- writing
def export(
    trajectories: Sequence[Trajectory],
    out: Path | str,
    manifests: dict[str, Manifest],
    formats: Sequence[str] = FORMATS,
) -> dict[str, Path]:
    """Write the asked formats under `out`; returns {format: path}."""
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
