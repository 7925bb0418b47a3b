"""The benchmark counter: `tests/fixtures/counter` without its `history` list.

Every server under test does the same work per call (add to an int, return it). The test fixture
also appends to `history`, and since a writing tool deep-copies and revalidates the state, its
per-call cost grows with the number of calls made (about 0.5 us per entry), which would swamp the
transport figures this benchmark is about. Pass `--env tests/fixtures/counter` to measure it anyway.
"""

from __future__ import annotations

from envreg.env import Environment, EnvState, ToolError


class CounterState(EnvState):
    value: int = 0


env = Environment("counter", CounterState, version="1.0.0", domain="test", description="A single counter.")


@env.tool
def increment(state: CounterState, by: int = 1) -> int:
    """Add to the counter and return its new value.

    Args:
        by: How much to add; must be positive.
    """
    if by <= 0:
        raise ToolError("by must be positive; use a positive step")
    state.value += by
    return state.value


@env.tool(read_only=True)
def get(state: CounterState) -> int:
    """Return the counter's value."""
    return state.value
