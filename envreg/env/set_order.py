"""Sets in a state's JSON, in one order: pydantic writes a set in its iteration order, which depends on the
order of insertion and on the process's hash seed, so two equal states could hash differently (in two
processes, or after the same items were added in another order). A state's JSON writes the items of every
field typed as a set (`set[...]`, `frozenset[...]`, at any depth: in lists, dicts, tuples, nested models,
optional) sorted: strings and numbers by value, anything else by its canonical JSON. A model without such fields costs nothing."""

from __future__ import annotations

import json
import types
import typing
from collections import abc
from collections.abc import Callable
from functools import cache
from typing import Any

from pydantic import BaseModel

Fix = Callable[[Any], Any]
"""Puts the sets inside a JSON value in order (in place where it can) and returns the value."""

SET_TYPES = (set, frozenset, abc.Set, abc.MutableSet)
SEQUENCE_TYPES = (list, tuple, abc.Sequence, abc.MutableSequence)
MAPPING_TYPES = (dict, abc.Mapping, abc.MutableMapping)


def _sort_key(item: Any) -> str:
    return json.dumps(item, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _origin_args(tp: Any) -> tuple[Any, tuple[Any, ...]]:
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        return _origin_args(typing.get_args(tp)[0])
    return origin, typing.get_args(tp)


def _has_sets(tp: Any, seen: frozenset[type] = frozenset()) -> bool:
    """Whether a set can be reached from `tp` (a model reached again through itself adds nothing)."""
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        if tp in seen:
            return False
        inner = seen | {tp}
        return any(_has_sets(f.annotation, inner) for f in tp.model_fields.values())
    origin, args = _origin_args(tp)
    if tp in SET_TYPES or origin in SET_TYPES:
        return True
    return any(_has_sets(arg, seen) for arg in args if arg is not Ellipsis)


def set_fixer(tp: Any) -> Fix | None:
    """The `Fix` for JSON of type `tp`, or None where `tp` holds no set (cached by type)."""
    try:
        return _cached_fixer(tp)
    except TypeError:  # an annotation with unhashable metadata
        return _fixer(tp)


@cache
def _cached_fixer(tp: Any) -> Fix | None:
    return _fixer(tp)


def _fixer(tp: Any) -> Fix | None:
    if not _has_sets(tp):
        return None
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return _model_fixer(tp)
    origin, args = _origin_args(tp)
    if tp in SET_TYPES or origin in SET_TYPES:
        item = set_fixer(args[0]) if args else None
        return lambda value: _sorted(value, item)
    if origin in (typing.Union, types.UnionType):
        members = [fix for arg in args if (fix := set_fixer(arg)) is not None]
        return lambda value: _each(members, value)
    if origin in MAPPING_TYPES:
        values = set_fixer(args[1]) if len(args) == 2 else None
        return (lambda value: _values(value, values)) if values else None
    if origin in SEQUENCE_TYPES:
        if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
            positions = [set_fixer(arg) for arg in args]
            return lambda value: _positions(value, positions)
        items = set_fixer(args[0]) if args else None
        return (lambda value: _items(value, items)) if items else None
    return None


def _model_fixer(model: type[BaseModel]) -> Fix:
    def fix(value: Any) -> Any:
        if isinstance(value, dict):
            for key, field_fix in _field_fixers(model):
                if key in value:
                    value[key] = field_fix(value[key])
        return value

    return fix


@cache
def _field_fixers(model: type[BaseModel]) -> tuple[tuple[str, Fix], ...]:
    """(JSON key, fix) of each field of `model` that holds a set; built on first use (models may nest
    themselves)."""
    fixes = []
    for name, field in model.model_fields.items():
        if (fix := set_fixer(field.annotation)) is not None:
            keys = {name, field.alias or name, field.serialization_alias or name}
            fixes += [(key, fix) for key in sorted(keys)]
    return tuple(fixes)


def _sorted(value: Any, item: Fix | None) -> Any:
    if not isinstance(value, list):
        return value
    if item is not None:
        value = [item(v) for v in value]
    if all(type(v) is str for v in value) or all(type(v) in (int, float) for v in value):
        return sorted(value)
    return sorted(value, key=_sort_key)


def _each(members: list[Fix], value: Any) -> Any:
    for fix in members:
        value = fix(value)
    return value


def _values(value: Any, fix: Fix) -> Any:
    if isinstance(value, dict):
        for key in value:
            value[key] = fix(value[key])
    return value


def _items(value: Any, fix: Fix) -> Any:
    if isinstance(value, list):
        value[:] = [fix(v) for v in value]
    return value


def _positions(value: Any, fixes: list[Fix | None]) -> Any:
    if isinstance(value, list):
        for i, fix in enumerate(fixes[: len(value)]):
            if fix is not None:
                value[i] = fix(value[i])
    return value
