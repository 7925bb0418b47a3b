"""Canonical JSON and its digests: the one byte form that states and manifests are compared in."""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any


def canonical_json(value: Any, *, normalized: bool = False) -> str:
    """Serialize `value` with sorted keys, no whitespace, UTF-8 text and shortest round-trip floats.

    Integral floats are written as integers (``1.0`` -> ``1``) so that a value read back from
    JSON by any language hashes the same. `normalized`: `value` is already `canonical_value`'s
    output, which spares a second walk over it.
    """
    return json.dumps(
        value if normalized else _normalize(value),
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        allow_nan=False,
    )


def canonical_value(value: Any) -> Any:
    """A fresh copy of `value` as canonical JSON reads back: string keys, lists for tuples, integral floats
    as integers; a value JSON has no form for is a `TypeError` (`ValueError` for NaN and infinities)."""
    return _normalize(value)


def _normalize(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _normalize(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_normalize(v) for v in value]
    if isinstance(value, float):
        return _number(value)
    if value is None or isinstance(value, str | int):
        return value
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def canonical_equal(a: Any, b: Any) -> bool:
    """Whether `a` and `b` have one canonical JSON (``True`` is not ``1``, ``1.0`` is ``1``, a tuple is a
    list), without writing either: a walk that stops at the first difference and copies nothing (only
    objects whose keys differ and are not all strings are written out to compare)."""
    kind = type(a)
    if kind is type(b):  # JSON read back: the same types on both sides
        if kind is dict:
            if a.keys() != b.keys():
                return not (_string_keys(a) and _string_keys(b)) and canonical_json(a) == canonical_json(b)
            return all(canonical_equal(value, b[key]) for key, value in a.items())
        if kind is list or kind is tuple:
            return len(a) == len(b) and all(canonical_equal(x, y) for x, y in zip(a, b, strict=True))
        if kind is str or kind is int or kind is bool or a is None:
            return a == b
    if isinstance(a, dict) and isinstance(b, dict):  # a dict and a subclass of it
        return canonical_equal(dict(a), dict(b))
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(canonical_equal(x, y) for x, y in zip(a, b, strict=True))
    if not (_json_kind(a) and _json_kind(b)):
        return canonical_json(a) == canonical_json(b)  # a value JSON has no form for: its error
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, int | float) and isinstance(b, int | float):
        x, y = _number(a), _number(b)
        return type(x) is type(y) and x == y
    if isinstance(a, str) and isinstance(b, str):
        return a == b
    return a is None and b is None  # or two kinds of value


def _string_keys(value: dict[Any, Any]) -> bool:
    return all(type(key) is str for key in value)


def _json_kind(value: Any) -> bool:
    return value is None or isinstance(value, dict | list | tuple | str | int | float)


def _number(value: int | float) -> int | float:
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"canonical JSON has no form for the number {value!r}")
        if value.is_integer() and abs(value) < 2**53:
            return int(value)
    return value


def sha256_hex(data: str | bytes) -> str:
    """Hex sha256 of text (UTF-8) or bytes."""
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()


def digest(value: Any) -> str:
    """``sha256:<hex>`` of the canonical JSON of `value`."""
    return "sha256:" + sha256_hex(canonical_json(value))
