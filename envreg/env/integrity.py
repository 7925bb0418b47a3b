"""`id_problems`: the id bookkeeping every environment's state validator repeats."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from envreg.env.state import EnvState

_ID = re.compile(r"^([a-z]+)_(\d+)$")


def id_problems(state: EnvState, tables: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """What is wrong with the id-keyed tables of a state, as readable sentences (empty when nothing).

    `tables` maps an id prefix to a table of entities that have an `id` attribute, e.g.
    ``{"tsk": state.tasks}``. Each entry must be stored under its own id, each id must have the
    table's prefix, and no id may be beyond ``state.id_counters[prefix]`` (new ids would collide).
    """
    problems = []
    for prefix, table in tables.items():
        for key, item in table.items():
            item_id = item.id
            if key != item_id:
                problems.append(f"key {key!r} holds {item_id!r}: each entry must be stored under its own id")
            m = _ID.match(item_id)
            if m is None or m.group(1) != prefix:
                problems.append(f"id {item_id!r} must look like {prefix}_0001")
                continue
            counter = state.id_counters.get(prefix, 0)
            if int(m.group(2)) > counter:
                problems.append(
                    f"id {item_id} is beyond id_counters[{prefix!r}]={counter}: new ids would collide"
                )
    return problems
