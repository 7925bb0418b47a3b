"""Trace matching and state comparison: the pure parts of the reward."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

from envreg.canonical import canonical_equal
from envreg.env.scenario import without_volatile


def values_match(expected: Any, got: Any, rel_tol: float, abs_tol: float) -> bool:
    """JSON equality, numbers within tolerance (a numeric string counts as its number)."""
    if isinstance(expected, bool) or isinstance(got, bool):
        return expected == got and type(expected) is type(got)
    if isinstance(expected, int | float) and isinstance(got, int | float | str):
        try:
            number = float(got)
        except ValueError:
            return False
        return math.isclose(float(expected), number, rel_tol=rel_tol, abs_tol=abs_tol)
    if isinstance(expected, dict):
        return (
            isinstance(got, dict)
            and expected.keys() == got.keys()
            and all(values_match(v, got[k], rel_tol, abs_tol) for k, v in expected.items())
        )
    if isinstance(expected, list):
        return (
            isinstance(got, list)
            and len(expected) == len(got)
            and all(values_match(a, b, rel_tol, abs_tol) for a, b in zip(expected, got, strict=True))
        )
    return expected == got


def normalized_arguments(environment: Any, tool: str, arguments: dict[str, Any]) -> dict[str, Any] | None:
    """Arguments as the tool of `environment` itself reads them (defaults filled, values in JSON form);
    as written when they are invalid; None when the environment has no such tool."""
    if environment is None or tool not in environment.tools:
        return None
    try:
        return environment.tools[tool].arguments_model.model_validate(arguments).model_dump(mode="json")
    except Exception:  # invalid arguments: compare them as written
        return arguments


def arguments_match(
    expected: dict[str, Any], got: dict[str, Any], masked: Sequence[str], rel_tol: float, abs_tol: float
) -> bool:
    """Same argument names and values, except the masked ones (their values, or their absence, are free)."""
    keys = (expected.keys() | got.keys()) - set(masked)
    return all(
        k in expected and k in got and values_match(expected[k], got[k], rel_tol, abs_tol) for k in keys
    )


def max_matching(n_got: int, edges: list[list[int]], ordered: bool) -> list[int]:
    """For each expected item, the index of the predicted item it is matched to (-1: none), one-to-one.

    `edges[i]` lists the predicted items that expected item `i` may match. Unordered: a maximum
    bipartite matching (augmenting paths). Ordered: the longest common subsequence, so matched
    calls keep the oracle's order.
    """
    n_expected = len(edges)
    if ordered:
        return _lcs(n_expected, n_got, edges)
    owner = [-1] * n_got

    def augment(i: int, seen: list[bool]) -> bool:
        for j in edges[i]:
            if not seen[j]:
                seen[j] = True
                if owner[j] == -1 or augment(owner[j], seen):
                    owner[j] = i
                    return True
        return False

    for i in range(n_expected):
        augment(i, [False] * n_got)
    assignment = [-1] * n_expected
    for j, i in enumerate(owner):
        if i != -1:
            assignment[i] = j
    return assignment


def _lcs(n: int, m: int, edges: list[list[int]]) -> list[int]:
    hit = [set(e) for e in edges]
    table = [[0] * (m + 1) for _ in range(n + 1)]
    for i in range(n - 1, -1, -1):
        for j in range(m - 1, -1, -1):
            table[i][j] = table[i + 1][j + 1] + 1 if j in hit[i] else max(table[i + 1][j], table[i][j + 1])
    assignment, i, j = [-1] * n, 0, 0
    while i < n and j < m:
        if j in hit[i] and table[i][j] == table[i + 1][j + 1] + 1:
            assignment[i] = j
            i, j = i + 1, j + 1
        elif table[i + 1][j] >= table[i][j + 1]:
            i += 1
        else:
            j += 1
    return assignment


def entities(state: dict[str, Any]) -> dict[str, Any]:
    """A state as entities: each item of a collection (an object of objects, or a list of objects
    with an ``id``) is one entity; any other top-level field is one entity."""
    out: dict[str, Any] = {}
    for key, value in state.items():
        if isinstance(value, dict) and value and all(isinstance(v, dict) for v in value.values()):
            for item_key, item in value.items():
                out[f"{key}.{item_key}"] = item
        elif isinstance(value, list) and value and all(isinstance(v, dict) and "id" in v for v in value):
            for item in value:
                out[f"{key}[{item['id']}]"] = item
        else:
            out[key] = value
    return out


_ABSENT = object()


def _same(a: Any, b: Any) -> bool:
    return a is b or (a is not _ABSENT and b is not _ABSENT and canonical_equal(a, b))


def entity_score(
    initial: dict[str, Any], expected: dict[str, Any], got: dict[str, Any], volatile: Sequence[str] = ()
) -> tuple[float, list[str]]:
    """Partial credit: the share of entities that the oracle or the prediction changed which end as
    the oracle's. Returns the score and the entities that differ (1.0 and none when the states are equal)."""
    if volatile:
        initial, expected, got = (without_volatile(s, volatile) for s in (initial, expected, got))
    before, want, have = entities(initial), entities(expected), entities(got)
    relevant = sorted(
        k
        for k in want.keys() | have.keys()
        if not _same(want.get(k, _ABSENT), before.get(k, _ABSENT))
        or not _same(have.get(k, _ABSENT), before.get(k, _ABSENT))
    )
    wrong = [k for k in relevant if not _same(want.get(k, _ABSENT), have.get(k, _ABSENT))]
    if not relevant:
        return 1.0, []
    return 1 - len(wrong) / len(relevant), wrong


def without_fields(value: Any, names: Sequence[str]) -> Any:
    """`value` without the top-level fields `names` of its objects (noise an augmentation added)."""
    if not names:
        return value
    if isinstance(value, dict):
        return {k: v for k, v in value.items() if k not in names}
    if isinstance(value, list):
        return [without_fields(v, names) for v in value]
    return value


def _scalars(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [s for v in value.values() for s in _scalars(v)]
    if isinstance(value, list):
        return [s for v in value for s in _scalars(v)]
    return [] if value is None or isinstance(value, bool) else [value]


def result_obtained(expected: Any, value: Any, rendered: str | None, noise: Sequence[str] = ()) -> bool:
    """Whether a replayed call's result is the oracle's `expected` result.

    `value` is the result as data (with the `noise` fields an augmentation added), `rendered` the
    text the agent got when an augmentation reshaped it (YAML, XML, markdown): then every scalar of
    `expected` must appear in that text, as any of its renderings writes it.
    """
    if (
        rendered is not None
        and isinstance(value, str)
        and value == rendered
        and not isinstance(expected, str)
    ):
        import html

        text = html.unescape(rendered)
        for scalar in _scalars(expected):
            forms = [json.dumps(scalar, ensure_ascii=False)] if isinstance(scalar, int | float) else []
            if isinstance(scalar, str):
                forms = [
                    scalar,
                    json.dumps(scalar, ensure_ascii=False)[1:-1],
                    scalar.replace("|", "\\|").replace("\n", " "),
                ]
            if not any(form in text for form in forms):
                return False
        return True
    return canonical_equal(without_fields(value, noise), expected)
