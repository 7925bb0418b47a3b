"""`lookup`: the "get an entity by id or tell the agent how to find one" step every environment repeats."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

from envreg.env.tool import ToolError

K = TypeVar("K")
V = TypeVar("V")


def lookup(items: Mapping[K, V], key: K, what: str, hint: str = "") -> V:
    """`items[key]`, or a `ToolError` such as "No event with id 'evt_9'. List events with list_events.".

    `what` names the entity ("event"); `hint` says how the agent finds valid keys.
    """
    try:
        return items[key]
    except KeyError:
        raise ToolError(f"No {what} with id {key!r}." + (f" {hint}" if hint else "")) from None
