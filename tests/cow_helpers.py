"""Random tool calls over the catalog, and the reference semantics they are compared with.

The reference is how a writing call worked before committed states: deep-copy the state, run the tool
on the copy, revalidate the whole copy, keep it only if all of that succeeded.
"""

from __future__ import annotations

import copy
import random
from typing import Any

from envreg.env import Environment, ToolError, ToolResult, load_scenarios


def call_pool(env: Environment) -> list[tuple[str, dict[str, Any]]]:
    """Every (tool, arguments) the environment's scenarios use, plus one call per tool without arguments."""
    scenarios, _ = load_scenarios(env.folder)
    calls = [(step.tool, step.arguments) for sc in scenarios for step in sc.steps]
    calls += [(name, {}) for name in env.tools]
    return calls


def initial_states(env: Environment) -> list[dict[str, Any] | None]:
    scenarios, _ = load_scenarios(env.folder)
    return [None] + [sc.initial_state for sc in scenarios if sc.initial_state is not None]


def mutate(rng: random.Random, arguments: dict[str, Any]) -> dict[str, Any]:
    """Arguments made wrong in one of a few ways (or left right), so that many calls fail half way."""
    args = copy.deepcopy(arguments)
    roll = rng.random()
    if not args or roll < 0.55:
        return args
    key = rng.choice(sorted(args))
    value = args[key]
    if roll < 0.7 and isinstance(value, str):
        args[key] = value[:-1] + ("9" if not value.endswith("9") else "8")
    elif roll < 0.8 and isinstance(value, int | float) and not isinstance(value, bool):
        args[key] = rng.choice([-value, value * 1000 + 7, 0, value + 1])
    elif roll < 0.88:
        del args[key]
    elif roll < 0.94:
        args[key] = None
    else:
        args["unexpected"] = 1
    return args


def random_calls(env: Environment, rng: random.Random, n: int) -> list[tuple[str, dict[str, Any]]]:
    pool = call_pool(env)
    return [(tool, mutate(rng, args)) for tool, args in (rng.choice(pool) for _ in range(n))]


def reference_call(
    env: Environment, state: Any, name: str, arguments: dict[str, Any]
) -> tuple[Any, ToolResult]:
    """(new state, result) the pre-journal way; `state` is a plain (uncommitted) state model."""
    tool = env.get_tool(name)
    try:
        kwargs = tool.parse_arguments(arguments)
    except ToolError as exc:
        return state, ToolResult(error=str(exc))
    working = state.model_copy(deep=True)
    try:
        result = tool.to_result(tool.fn(working, **kwargs))
        if not tool.annotations.read_only and env.check_state:
            working = env.state_model.model_validate(working.model_dump())
    except ToolError as exc:
        return state, ToolResult(error=str(exc) or f"{name} failed")
    except Exception as exc:
        return state, ToolResult(error=f"{name} failed with an internal error: {type(exc).__name__}: {exc}")
    return (state if tool.annotations.read_only else working), result
