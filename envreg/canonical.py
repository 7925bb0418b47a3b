"""Canonical JSON and its digests: the one byte form that states and manifests are compared in."""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any


def _check_numbers(value: Any) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"canonical JSON has no form for the number {value!r}")


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
        _check_numbers(value)
        if value.is_integer() and abs(value) < 2**53:
            return int(value)
        return value
    if value is None or isinstance(value, str | int):
        return value
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def sha256_hex(data: str | bytes) -> str:
    """Hex sha256 of text (UTF-8) or bytes."""
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()


def digest(value: Any) -> str:
    """``sha256:<hex>`` of the canonical JSON of `value`."""
    return "sha256:" + sha256_hex(canonical_json(value))
