"""Where two JSON values differ, as dotted paths a reviewer can look up (``events.evt_0001.start``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

_MISSING = object()
ROOT = "(the whole value)"


def differences(a: Any, b: Any, path: str = "") -> Iterator[tuple[str, Any, Any]]:
    """Yield ``(path, value in a, value in b)`` for every leaf where `a` and `b` differ, in key order; a key
    or item present on one side only has the marker `_MISSING` on the other (shown as "(absent)")."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b), key=str):
            sub = f"{path}.{key}" if path else str(key)
            yield from differences(a.get(key, _MISSING), b.get(key, _MISSING), sub)
    elif isinstance(a, list) and isinstance(b, list):
        for i in range(max(len(a), len(b))):
            left = a[i] if i < len(a) else _MISSING
            right = b[i] if i < len(b) else _MISSING
            yield from differences(left, right, f"{path}.{i}" if path else str(i))
    elif not _same(a, b):
        yield path or ROOT, a, b


def _same(a: Any, b: Any) -> bool:
    """Leaf equality as canonical JSON sees it: 1 == 1.0, but true != 1."""
    if a is _MISSING or b is _MISSING or isinstance(a, bool) or isinstance(b, bool):
        return a is b
    return a == b


def shown(value: Any, limit: int = 60) -> str:
    """A short rendering of a value for evidence lines."""
    if value is _MISSING:
        return "(absent)"
    text = json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def describe(a: Any, b: Any, labels: tuple[str, str] = ("a", "b"), limit: int = 3) -> str:
    """``path: A vs B`` for the first `limit` differences, e.g. ``notes.0.id: "n_1f3a" (run 1) vs "n_9c2e" (run 2)``."""
    found = []
    for i, (path, left, right) in enumerate(differences(a, b)):
        if i == limit:
            found.append("…")
            break
        where = "" if path == ROOT else f"{path}: "
        found.append(f"{where}{shown(left)} ({labels[0]}) vs {shown(right)} ({labels[1]})")
    return "; ".join(found) if found else "no difference"
