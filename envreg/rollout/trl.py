"""TRL: envreg sandboxes behind GRPOTrainer's ``environment_factory``.

```python
from envreg.rollout.trl import environment_factory, trl_dataset

tasks = scenario_tasks(["bank"])                        # or read_tasks("trajectories.jsonl")
trainer = GRPOTrainer(model, args=GRPOConfig(...), train_dataset=trl_dataset(tasks),
                      environment_factory=environment_factory(tasks))
```

TRL makes one environment instance per rollout and exposes its public methods as tools: the class
`environment_factory` builds has one method per tool of the task's environments (signature and
docstring from the tool's schema, which transformers turns back into the JSON schema the chat
template shows). ``reset(**row)`` starts the rollout's sandboxes in the row's task (column
``envreg_task``) and closes the previous rollout's; each tool call runs in them; ``get_reward()`` is
envreg's composite reward of the calls the rollout made. Tasks over other environments need a
class each: `environment_factories` gives ``{name: class}`` and the rows an ``environment`` column.
"""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Sequence
from typing import Any, Literal

from envreg.env import load_environment
from envreg.manifest import build_manifest
from envreg.rollout.background import shared
from envreg.rollout.session import Sessions, task_from_json
from envreg.rollout.task import Task

TASK_COLUMN = "envreg_task"
_PRIMITIVES = {"string": str, "integer": int, "number": float, "boolean": bool, "object": dict, "array": list}
_ids = itertools.count(1)
_sessions: dict[tuple[str, str], Sessions] = {}


def _hint(schema: dict[str, Any]) -> Any:
    """A Python type hint that transformers' ``get_json_schema`` turns back into (about) `schema`."""
    members = schema.get("anyOf") or schema.get("oneOf")
    if members:
        hints = [_hint(m) for m in members if m.get("type") != "null"] or [str]
        hint = hints[0]
        for other in hints[1:]:
            hint = hint | other
        return hint | None if any(m.get("type") == "null" for m in members) else hint
    if "enum" in schema and all(isinstance(v, str | int) for v in schema["enum"]):
        return Literal[tuple(schema["enum"])]  # type: ignore[misc]
    kind = schema.get("type", "object")
    if isinstance(kind, list):
        return _hint({"anyOf": [{**schema, "type": k} for k in kind]})
    if kind == "array" and isinstance(schema.get("items"), dict):
        return list[_hint(schema["items"])]  # type: ignore[misc]
    return _PRIMITIVES.get(kind, dict)


def _method(env: str, tool: str, name: str, description: str, parameters: dict[str, Any]):
    """A method ``name(self, **arguments)`` with the tool's signature and a Google-style docstring."""

    def call(self, **arguments: Any) -> str:
        return self._call(env, tool, arguments)

    required = set(parameters.get("required") or [])
    props = parameters.get("properties") or {}
    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    hints: dict[str, Any] = {}
    lines = [(description or name).strip(), "", "Args:"]
    for arg in sorted(props, key=lambda a: a not in required):
        hints[arg] = _hint(props[arg])
        default = inspect.Parameter.empty if arg in required else props[arg].get("default")
        params.append(
            inspect.Parameter(arg, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=hints[arg])
        )
        text = " ".join((props[arg].get("description") or arg).split())
        lines.append(f"    {arg}: {text}")
    if not props:
        lines = lines[:1]
    hints["return"] = str
    call.__name__ = call.__qualname__ = name
    call.__doc__ = "\n".join([*lines, "", "Returns:", "    The tool's result (JSON) or its error message."])
    call.__signature__ = inspect.Signature(params, return_annotation=str)  # type: ignore[attr-defined]
    call.__annotations__ = hints
    return call


class EnvregEnvironment:
    """Base of the classes `environment_factory` makes: one rollout's sandboxes, calls and reward."""

    envs: tuple[str, ...] = ()
    isolation: str = "local"
    sources: dict[str, Any] = {}

    def __init__(self) -> None:
        self.task: Task | None = None
        self.key: str | None = None

    def _pool(self) -> tuple[Any, Sessions]:
        background = shared()
        index = (self.isolation, repr(sorted(self.sources.items())))
        if index not in _sessions:
            _sessions[index] = Sessions(background.runtime, isolation=self.isolation, sources=self.sources)
        return background, _sessions[index]

    def reset(self, **row: Any) -> None:
        """A new rollout of the row's task (``envreg_task``): the previous rollout's sandboxes are closed."""
        background, pool = self._pool()
        if self.key is not None:
            background.call(pool.close, self.key)
        text = row.get(TASK_COLUMN)
        if not text:
            raise ValueError(
                f"the row has no {TASK_COLUMN!r} column: build the dataset with envreg's trl_dataset()"
            )
        self.task = text if isinstance(text, Task) else task_from_json(text)
        self.key = f"trl_{next(_ids)}"
        background.call(pool.get, self.key, self.task)
        return None

    def _call(self, env: str, tool: str, arguments: dict[str, Any]) -> str:
        if self.task is None or self.key is None:
            raise RuntimeError("call reset() before the tools")
        background, pool = self._pool()
        return background.call(pool.call, self.key, self.task, env, tool, arguments).result

    def get_reward(self) -> float:
        """envreg's composite reward of the calls this rollout made, against its task's oracle."""
        if self.task is None or self.key is None:
            return 0.0
        background, pool = self._pool()
        return background.call(pool.score, self.key, self.task).reward

    def close(self) -> None:
        """Close this rollout's sandboxes now (TRL reuses instances; `reset` closes them too)."""
        if self.key is not None:
            background, pool = self._pool()
            background.call(pool.close, self.key)
            self.key = None


def environment_class(
    envs: Sequence[str], *, isolation: str = "local", sources: dict[str, Any] | None = None
) -> type[EnvregEnvironment]:
    """The environment class for tasks over `envs`: a method per tool (``env__tool`` over several)."""
    envs = tuple(envs)
    methods: dict[str, Any] = {}
    for env in envs:
        manifest = build_manifest(load_environment((sources or {}).get(env, env)))
        for spec in manifest.tools:
            name = spec.name if len(envs) == 1 else f"{env}__{spec.name}"
            methods[name] = _method(env, spec.name, name, spec.description, spec.input_schema)
    title = "".join(p.title() for e in envs for p in e.replace("-", "_").split("_"))
    attrs = {"envs": envs, "isolation": isolation, "sources": dict(sources or {}), **methods}
    return type(f"{title}Environment", (EnvregEnvironment,), attrs)


def environment_factory(tasks: Sequence[Task], **options: Any) -> type[EnvregEnvironment]:
    """The ``environment_factory`` for tasks that all use the same environments."""
    kinds = {tuple(t.envs) for t in tasks}
    if len(kinds) != 1:
        raise ValueError(
            f"these tasks use {len(kinds)} sets of environments; use environment_factories() and the "
            "dataset's `environment` column"
        )
    return environment_class(next(iter(kinds)), **options)


def environment_factories(tasks: Sequence[Task], **options: Any) -> dict[str, type[EnvregEnvironment]]:
    """``{name: class}`` for a dataset mixing environments (rows name theirs in ``environment``)."""
    return {"+".join(e): environment_class(e, **options) for e in dict.fromkeys(tuple(t.envs) for t in tasks)}


def trl_dataset(tasks: Sequence[Task], *, environment_column: bool = False):
    """A `datasets.Dataset` for GRPOTrainer: ``prompt`` (the task's conversation), ``envreg_task``."""
    import datasets

    rows = [{"prompt": t.prompt(), TASK_COLUMN: t.model_dump_json()} for t in tasks]
    if environment_column:
        for row, task in zip(rows, tasks, strict=True):
            row["environment"] = "+".join(task.envs)
    return datasets.Dataset.from_list(rows)
