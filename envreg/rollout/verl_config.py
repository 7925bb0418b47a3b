"""What verl reads, without importing verl: tool schemas in its strict form, the tool config YAML, and
the RL rows' ``tools_kwargs`` / ``interaction_kwargs`` (`envreg.synth.export` fills them).

verl's ``OpenAIFunctionPropertySchema`` keeps ``type``, ``description`` and ``enum`` of each parameter
(and requires ``type``): an optional parameter (``anyOf`` with ``null``) gets the list of its types,
and what verl would drop (formats, patterns, item and object shapes) is kept, as compact JSON Schema,
at the end of the description, so the chat template still shows it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from envreg.manifest import Manifest
from envreg.synth.records import function_name

TOOL_CLASS = "envreg.rollout.verl.EnvregTool"
AGENT_NAME = "envreg_agent"
TASK_KEY = "envreg"
"""``extra_info.tools_kwargs[TASK_KEY].create_kwargs.task`` carries the row's task (JSON text)."""
_KEPT = ("type", "description", "enum", "title", "default")


def verl_property(schema: dict[str, Any]) -> dict[str, Any]:
    """One parameter's JSON Schema in verl's form (type, description, enum), nothing lost from the text."""
    members = schema.get("anyOf") or schema.get("oneOf")
    if "type" in schema:
        types: Any = schema["type"]
    elif members:
        found = []
        for member in members:
            t = member.get("type", "object")
            found += t if isinstance(t, list) else [t]
        types = list(dict.fromkeys(found))
        types = types[0] if len(types) == 1 else types
    else:
        types = "object" if "$ref" in schema or "properties" in schema else "string"
    prop: dict[str, Any] = {"type": types, "description": schema.get("description") or ""}
    enum = schema.get("enum") or next((m["enum"] for m in members or () if "enum" in m), None)
    if enum is not None:
        prop["enum"] = enum
    rest = {k: v for k, v in schema.items() if k not in _KEPT}
    if rest:
        detail = json.dumps(rest, ensure_ascii=False, separators=(",", ":"))
        prop["description"] = f"{prop['description']} JSON Schema: {detail}".strip()
    return prop


def verl_tool_schema(name: str, description: str, parameters: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI function tool schema that verl's ``OpenAIFunctionToolSchema`` validates."""
    properties = {k: verl_property(v) for k, v in (parameters.get("properties") or {}).items()}
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": properties,
                "required": list(parameters.get("required") or []),
            },
        },
    }


def tool_config(
    manifests: Iterable[Manifest], *, isolation: str = "local", names: list[str] | None = None
) -> dict[str, Any]:
    """verl's multi-turn tool config (``actor_rollout_ref.rollout.multi_turn.tool_config_path``) for every
    tool of `manifests`; tools are named as the RL export names them (``env__tool`` over several)."""
    manifests = list(manifests)
    envs = names or [m.name for m in manifests]
    tools = []
    for manifest in manifests:
        for spec in manifest.tools:
            name = function_name(manifest.name, spec.name, envs)
            tools.append(
                {
                    "class_name": TOOL_CLASS,
                    "config": {
                        "type": "native",
                        "env": manifest.name,
                        "tool": spec.name,
                        "isolation": isolation,
                    },
                    "tool_schema": verl_tool_schema(name, spec.description, spec.input_schema),
                }
            )
    return {"tools": tools}


def write_tool_config(path: Path | str, manifests: Iterable[Manifest], **options: Any) -> Path:
    """Write `tool_config` as YAML (JSON is YAML; verl reads it with OmegaConf)."""
    path = Path(path)
    path.write_text(json.dumps(tool_config(manifests, **options), ensure_ascii=False, indent=1) + "\n")
    return path


def row_kwargs(row: dict[str, Any]) -> dict[str, Any]:
    """The verl keys of an RL row's ``extra_info``: its task for the tools, its tool selection."""
    from envreg.rollout.task import Task

    task = Task.from_rl_row(row)
    selection = [t["function"]["name"] for t in json.loads(row["extra_info"]["tools"])]
    return {
        "tools_kwargs": {TASK_KEY: {"create_kwargs": {"task": task.model_dump_json()}}},
        "interaction_kwargs": {"name": TASK_KEY, "task_id": task.id},
        "tool_selection": selection,
        "need_tools_kwargs": True,
    }
