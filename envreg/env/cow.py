"""Committed states: immutable state trees that snapshots, restores and forks share, and the
transactions that derive a new one from an old one in O(size of the change).

A committed state is a tree of pydantic models and tracked containers (`TDict`, `TList`, `TSet`:
subclasses of the builtins that pydantic serializes as usual) that nothing changes in place. Many
instances, cached snapshots and forks hold the same tree, or share most of it.

A writing tool runs inside a `Transaction` on the committed tree. Its writes go in place and are
journaled (the first write to a node saves what the node held); reads record where each node was
found (a data descriptor per node-holding model field, and the containers' read methods). When the
tool returns, `commit` moves the new content of each written node into a new node, puts the old
content back, and copies the path from the root down to it: the new tree shares every node the
call did not change, and the old tree is exactly what it was. A tool that raises is undone from the
journal. Values the tool stored are frozen (plain containers become tracked ones); a committed node
stored in a second place is copied, so that a committed tree never holds one node twice.

Costs: the journal, the undo and the commit are proportional to the nodes written and the paths to
them, plus a C-level copy of each container on such a path (a dict of 5,000 entries: ~30 us).

Safety net: a written node the transaction cannot place (reached by a route it does not see, such as
a C function writing into a list, or `dict.__setitem__(d, k, v)`) makes `commit` raise
`CannotCommit`, before anything is published; the caller undoes the call and runs the tool again on
a deep copy, the slow way that is always right. Outside a transaction, a committed node refuses every
write (`CommittedStateError`): read-only tools cannot change a state.
"""

from __future__ import annotations

import copy
import functools
import threading
import types
import typing
from collections.abc import Iterable
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from enum import Enum
from typing import Any
from uuid import UUID

import pydantic_core
from pydantic import BaseModel

_MISSING: Any = object()
_LEAVES: set[type] = {
    str,
    int,
    float,
    bool,
    type(None),
    bytes,
    datetime,
    date,
    time,
    timedelta,
    Decimal,
    UUID,
}


class CommittedStateError(TypeError):
    """A write to a committed state outside a writing tool."""


class CannotCommit(Exception):
    """A transaction wrote a node it cannot place in the new tree; undo it and use a deep copy."""


class _Local(threading.local):
    txn: Transaction | None = None


_local = _Local()


def _refuse(node: Any) -> CommittedStateError:
    return CommittedStateError(
        f"this {type(node).__name__} belongs to a committed state, which snapshots and forks share: "
        "it changes only inside a writing tool (or through load_state), never in place"
    )


def _writing(node: Any) -> Transaction:
    txn = _local.txn
    if txn is None:
        raise _refuse(node)
    return txn


def _is_leaf(value: Any) -> bool:
    t = type(value)
    if t in _LEAVES:
        return True
    if issubclass(t, Enum):
        _LEAVES.add(t)
        return True
    return False


# ------------------------------------------------------------------------------------- markers


class Committed(set):
    """A committed model's fields-set (pydantic's own slot, so the model carries no extra attribute).

    `size` caches the model's compact JSON size; `memo` holds a root state's canonical text and hash.
    Copies (`model_copy`, `copy`, `pickle`) get a plain set: a copy is a new, uncommitted model.
    """

    __slots__ = ("memo", "size")  # read with getattr(..., default): unset until known

    def __copy__(self) -> set[str]:
        return set(self)

    def __deepcopy__(self, memo: dict) -> set[str]:
        return set(self)

    def __reduce__(self) -> Any:
        return (set, (list(self),))


def committed_model(value: Any) -> bool:
    return isinstance(value, BaseModel) and type(value.__pydantic_fields_set__) is Committed


def is_committed(value: Any) -> bool:
    """Whether `value` is a node of a committed tree (a tracked container or a committed model)."""
    return type(value) in _TRACKED or committed_model(value)


def _size_of(marker_set: Committed) -> int:
    return getattr(marker_set, "size", -1)


def marker(model: BaseModel) -> Committed:
    fields = model.__pydantic_fields_set__
    if type(fields) is not Committed:
        raise ValueError(f"{type(model).__name__} is not committed")
    return fields


# ------------------------------------------------------------------------------------- containers


class TDict(dict):
    """A committed dict: reads record where nodes are found, writes are journaled (or refused)."""

    __slots__ = ("_size",)

    def _seen(self) -> None:
        txn = _local.txn
        if txn is not None:
            txn.scanned.append(self)

    def __getitem__(self, key: Any) -> Any:
        value = dict.__getitem__(self, key)
        if type(value) not in _LEAVES:
            txn = _local.txn
            if txn is not None:
                txn.paths[id(value)] = (self, key)
        return value

    def get(self, key: Any, default: Any = None) -> Any:
        value = dict.get(self, key, _MISSING)
        if value is _MISSING:
            return default
        if type(value) not in _LEAVES:
            txn = _local.txn
            if txn is not None:
                txn.paths[id(value)] = (self, key)
        return value

    def __iter__(self) -> Any:  # also makes dict(d), {**d} and update(d) read through __getitem__
        self._seen()
        return dict.__iter__(self)

    def __reversed__(self) -> Any:
        self._seen()
        return dict.__reversed__(self)

    def values(self) -> Any:
        self._seen()
        return dict.values(self)

    def items(self) -> Any:
        self._seen()
        return dict.items(self)

    def copy(self) -> dict:
        self._seen()
        return dict(dict.items(self))

    __copy__ = copy

    def __or__(self, other: Any) -> Any:
        self._seen()
        return dict(dict.items(self)) | other

    def __ror__(self, other: Any) -> Any:
        self._seen()
        return other | dict(dict.items(self))

    def __deepcopy__(self, memo: dict) -> dict:
        return {copy.deepcopy(k, memo): copy.deepcopy(v, memo) for k, v in dict.items(self)}

    def __reduce__(self) -> Any:
        return (dict, (dict(dict.items(self)),))

    @classmethod
    def fromkeys(cls, keys: Iterable[Any], value: Any = None) -> dict:  # type: ignore[override]
        return dict.fromkeys(keys, value)

    def __setitem__(self, key: Any, value: Any) -> None:
        _writing(self).touch_key(self, key)
        dict.__setitem__(self, key, value)

    def __delitem__(self, key: Any) -> None:
        txn = _writing(self)
        if key in self:
            txn.touch_delete(self, key)
        dict.__delitem__(self, key)

    def pop(self, key: Any, *default: Any) -> Any:
        txn = _writing(self)
        if key in self:
            txn.touch_delete(self, key)
        return dict.pop(self, key, *default)

    def popitem(self) -> tuple[Any, Any]:
        txn = _writing(self)
        if self:
            txn.touch_delete(self, next(dict.__reversed__(self)))
        return dict.popitem(self)

    def setdefault(self, key: Any, default: Any = None) -> Any:
        if key in self:
            return self[key]
        self[key] = default
        return default

    def update(self, *args: Any, **kwargs: Any) -> None:
        _writing(self)
        for key, value in dict(*args, **kwargs).items():
            self[key] = value

    def __ior__(self, other: Any) -> TDict:
        self.update(other)
        return self

    def clear(self) -> None:
        txn = _writing(self)
        for key in list(dict.keys(self)):
            txn.touch_delete(self, key)
        dict.clear(self)


class TList(list):
    """A committed list: reads record where nodes are found, writes are journaled (or refused)."""

    __slots__ = ("_size",)

    def _seen(self) -> None:
        txn = _local.txn
        if txn is not None:
            txn.scanned.append(self)

    def __getitem__(self, index: Any) -> Any:
        value = list.__getitem__(self, index)
        if type(index) is slice:
            self._seen()
        elif type(value) not in _LEAVES:
            txn = _local.txn
            if txn is not None:
                txn.paths[id(value)] = (self, index if index >= 0 else len(self) + index)
        return value

    def __iter__(self) -> Any:
        self._seen()
        return list.__iter__(self)

    def __reversed__(self) -> Any:
        self._seen()
        return list.__reversed__(self)

    def copy(self) -> list:
        self._seen()
        return list(list.__iter__(self))

    __copy__ = copy

    def __add__(self, other: Any) -> list:
        self._seen()
        return list(list.__iter__(self)) + other

    def __radd__(self, other: Any) -> list:
        self._seen()
        return other + list(list.__iter__(self))

    def __mul__(self, n: Any) -> list:
        self._seen()
        return list(list.__iter__(self)) * n

    __rmul__ = __mul__

    def __deepcopy__(self, memo: dict) -> list:
        return [copy.deepcopy(v, memo) for v in list.__iter__(self)]

    def __reduce__(self) -> Any:
        return (list, (list(list.__iter__(self)),))

    # appends are journaled as a length; anything else saves the list once
    def append(self, value: Any) -> None:
        _writing(self).touch_list(self, appending=True)
        list.append(self, value)

    def extend(self, values: Iterable[Any]) -> None:
        values = list(values)
        _writing(self).touch_list(self, appending=True)
        list.extend(self, values)

    def __iadd__(self, values: Iterable[Any]) -> TList:  # type: ignore[override]
        self.extend(values)
        return self

    def __imul__(self, n: Any) -> TList:  # type: ignore[override]
        _writing(self).touch_list(self)
        return list.__imul__(self, n)  # type: ignore[return-value]

    def insert(self, index: Any, value: Any) -> None:
        _writing(self).touch_list(self)
        list.insert(self, index, value)

    def pop(self, index: Any = -1) -> Any:
        _writing(self).touch_list(self)
        return list.pop(self, index)

    def remove(self, value: Any) -> None:
        _writing(self).touch_list(self)
        list.remove(self, value)

    def __setitem__(self, index: Any, value: Any) -> None:
        _writing(self).touch_list(self)
        list.__setitem__(self, index, value)

    def __delitem__(self, index: Any) -> None:
        _writing(self).touch_list(self)
        list.__delitem__(self, index)

    def sort(self, *args: Any, **kwargs: Any) -> None:
        _writing(self).touch_list(self)
        list.sort(self, *args, **kwargs)

    def reverse(self) -> None:
        _writing(self).touch_list(self)
        list.reverse(self)

    def clear(self) -> None:
        _writing(self).touch_list(self)
        list.clear(self)


def _set_writer(name: str) -> Any:
    method = getattr(set, name)

    def write(self: TSet, *args: Any) -> Any:
        _writing(self).touch_set(self)
        result = method(self, *args)
        return self if name.startswith("__i") else result

    write.__name__ = name
    return write


class TSet(set):
    """A committed set: iteration is recorded, writes are journaled (or refused)."""

    __slots__ = ("_size",)

    def __iter__(self) -> Any:
        txn = _local.txn
        if txn is not None:
            txn.scanned.append(self)
        return set.__iter__(self)

    def copy(self) -> set:
        return set(set.__iter__(self))

    __copy__ = copy

    def __deepcopy__(self, memo: dict) -> set:
        return {copy.deepcopy(v, memo) for v in set.__iter__(self)}

    def __reduce__(self) -> Any:
        return (set, (list(set.__iter__(self)),))

    for _name in (
        "add", "discard", "remove", "pop", "clear", "update", "difference_update", "intersection_update",
        "symmetric_difference_update", "__ior__", "__iand__", "__isub__", "__ixor__",
    ):  # fmt: skip
        locals()[_name] = _set_writer(_name)
    del _name


_TRACKED = {TDict: dict, TList: list, TSet: set}


def _new_tracked(kind: type, content: Any) -> Any:
    node = kind(content)
    node._size = -1
    return node


# ------------------------------------------------------------------------------------- models


_HOOKED: set[type] = set()
_NODE_FIELDS: dict[type, tuple[str, ...]] = {}
"""Per hooked class, the fields whose type can hold a model or a container (the others hold scalars)."""
_LEAF_ANNOTATIONS = (str, int, float, bool, bytes, datetime, date, time, timedelta, Decimal, UUID, type(None))


def _holds_nodes(annotation: Any) -> bool:
    """Whether a field of this type can hold a model or a container (anything but known scalars)."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _holds_nodes(typing.get_args(annotation)[0])
    if origin is typing.Literal:
        return False
    if origin is typing.Union or origin is types.UnionType:
        return any(_holds_nodes(a) for a in typing.get_args(annotation))
    if isinstance(annotation, type):
        return not issubclass(annotation, (*_LEAF_ANNOTATIONS, Enum))
    return True


def hook(cls: type[BaseModel]) -> None:
    """Journal writes to instances of `cls`, and note which of its fields can hold nodes (idempotent).

    Reading a field costs nothing extra: where a model's field holds a written node is found at commit,
    from the models on the way (`Transaction._index`)."""
    if cls in _HOOKED:
        return
    for base in cls.__mro__[1:]:
        if isinstance(base, type) and issubclass(base, BaseModel) and base is not BaseModel:
            hook(base)
    if not getattr(cls.__setattr__, "_envreg_journaled", False):
        original, original_del = cls.__setattr__, cls.__delattr__

        def __setattr__(self: BaseModel, name: str, value: Any) -> None:
            if type(self.__pydantic_fields_set__) is Committed:
                _writing(self).touch_model(self)
            original(self, name, value)

        def __delattr__(self: BaseModel, name: str) -> None:
            if type(self.__pydantic_fields_set__) is Committed:
                _writing(self).touch_model(self)
            original_del(self, name)

        __setattr__._envreg_journaled = True  # type: ignore[attr-defined]
        type.__setattr__(cls, "__setattr__", __setattr__)
        type.__setattr__(cls, "__delattr__", __delattr__)
    _NODE_FIELDS[cls] = tuple(
        name for name, field in cls.__pydantic_fields__.items() if _holds_nodes(field.annotation)
    )
    _HOOKED.add(cls)


# ------------------------------------------------------------------------------------- freezing


def freeze(value: Any) -> Any:
    """`value` as a committed node: fresh models are marked in place (their containers replaced by
    tracked ones) and plain containers become tracked copies, in time linear in what is fresh. A
    committed node inside it is replaced by a copy: a committed tree holds each node once."""
    return _Freezer().freeze(value)


class _Freezer:
    def __init__(self) -> None:
        self.placed: set[int] = set()  # committed nodes found in a new place (each replaced by a copy)

    def freeze(self, value: Any) -> Any:
        t = type(value)
        if t in _LEAVES:
            return value
        if t in _TRACKED or (t in _HOOKED and type(value.__pydantic_fields_set__) is Committed):
            self.placed.add(id(value))
            return self.freeze(copy.deepcopy(value))
        if isinstance(value, BaseModel):
            return self._model(value)
        if isinstance(value, dict):
            return _new_tracked(TDict, {k: self.freeze(v) for k, v in value.items()})
        if isinstance(value, list):
            return _new_tracked(TList, [self.freeze(v) for v in value])
        if isinstance(value, set):
            return _new_tracked(TSet, [self.freeze(v) for v in value])
        if t is tuple:
            items = tuple(self.freeze(v) for v in value)
            return value if all(a is b for a, b in zip(items, value, strict=True)) else items
        if issubclass(t, Enum):
            _LEAVES.add(t)
        return value  # frozensets, enums and other immutable values are kept as they are

    def _model(self, model: BaseModel) -> BaseModel:
        cls = type(model)
        holding = _NODE_FIELDS.get(cls)
        if holding is None:
            hook(cls)
            holding = _NODE_FIELDS[cls]
        fields = model.__dict__
        for name in holding:
            value = fields.get(name)
            if type(value) not in _LEAVES:
                frozen = self.freeze(value)
                if frozen is not value:
                    fields[name] = frozen  # pyright: ignore[reportIndexIssue]
        extra = model.__pydantic_extra__
        if extra:
            for name, value in extra.items():
                extra[name] = self.freeze(value)
        object.__setattr__(model, "__pydantic_fields_set__", Committed(model.__pydantic_fields_set__))
        return model


def thaw(value: Any) -> Any:
    """A deep, uncommitted copy (plain containers, fresh models): what a tool may change freely."""
    return copy.deepcopy(value)


# ------------------------------------------------------------------------------------- transactions


def _split_model(model: BaseModel) -> BaseModel:
    """A new committed model that takes over `model`'s current content (its dicts move, nothing is copied)."""
    new = type(model).__new__(type(model))
    object.__setattr__(new, "__dict__", model.__dict__)
    object.__setattr__(new, "__pydantic_fields_set__", Committed(model.__pydantic_fields_set__))
    object.__setattr__(new, "__pydantic_extra__", model.__pydantic_extra__)
    object.__setattr__(new, "__pydantic_private__", model.__pydantic_private__)
    return new


def _copy_model(model: BaseModel) -> BaseModel:
    """A new committed model with the same children (a shallow copy, for a changed path)."""
    new = type(model).__new__(type(model))
    object.__setattr__(new, "__dict__", dict(model.__dict__))
    object.__setattr__(new, "__pydantic_fields_set__", Committed(model.__pydantic_fields_set__))
    extra, private = model.__pydantic_extra__, model.__pydantic_private__
    object.__setattr__(new, "__pydantic_extra__", dict(extra) if extra is not None else None)
    object.__setattr__(new, "__pydantic_private__", dict(private) if private is not None else None)
    return new


def _copy_node(node: Any) -> Any:
    """A new committed node with `node`'s children (C-level copy for containers)."""
    kind = type(node)
    if kind is TDict:
        return _new_tracked(TDict, dict.copy(node))
    if kind is TList:
        return _new_tracked(TList, list.copy(node))
    if kind is TSet:
        return _new_tracked(TSet, set.copy(node))
    return _copy_model(node)


def _holds(parent: Any, key: Any, node: Any) -> Any:
    """The key under which `parent` holds `node` (`key` when it still does), or _MISSING."""
    kind = type(parent)
    if kind is TDict:
        return key if dict.get(parent, key, _MISSING) is node else _MISSING
    if kind is TList:
        if type(key) is int and key < len(parent) and list.__getitem__(parent, key) is node:
            return key
        for i, item in enumerate(list.__iter__(parent)):
            if item is node:
                return i
        return _MISSING
    if kind is TSet:
        return _MISSING
    return key if parent.__dict__.get(key, _MISSING) is node else _MISSING


def _put(parent: Any, key: Any, node: Any) -> None:
    kind = type(parent)
    if kind is TDict:
        dict.__setitem__(parent, key, node)
    elif kind is TList:
        list.__setitem__(parent, key, node)
    else:
        parent.__dict__[key] = node


class Transaction:
    """One writing call on a committed tree: `with txn:` run the tool, then `commit()` or `rollback()`."""

    def __init__(self, root: BaseModel) -> None:
        self.root = root
        self.paths: dict[int, tuple[Any, Any]] = {}
        self.scanned: list[Any] = []
        self.models: dict[int, tuple[BaseModel, dict, set, Any, Any]] = {}
        self.dicts: dict[int, tuple[TDict, dict, dict | None]] = {}  # node, {key: old value}, old copy
        self.lists: dict[int, tuple[TList, int, list | None]] = {}  # node, old length, old copy
        self.sets: dict[int, tuple[TSet, set]] = {}

    def __enter__(self) -> Transaction:
        if _local.txn is not None:
            raise RuntimeError("a tool call is already running in this thread")
        _local.txn = self
        return self

    def __exit__(self, *exc: object) -> None:
        _local.txn = None

    @property
    def wrote(self) -> bool:
        return bool(self.models or self.dicts or self.lists or self.sets)

    # journal ----------------------------------------------------------------------------------
    def touch_model(self, model: BaseModel) -> None:
        if id(model) not in self.models:
            extra, private = model.__pydantic_extra__, model.__pydantic_private__
            self.models[id(model)] = (
                model,
                dict(model.__dict__),
                set(model.__pydantic_fields_set__),
                dict(extra) if extra is not None else None,
                dict(private) if private is not None else None,
            )

    def touch_key(self, node: TDict, key: Any) -> None:
        entry = self.dicts.get(id(node))
        if entry is None:
            entry = self.dicts[id(node)] = (node, {}, None)
        if key not in entry[1]:
            entry[1][key] = dict.get(node, key, _MISSING)

    def touch_delete(self, node: TDict, key: Any) -> None:
        """A key leaves the dict: save the dict as it was, so that undoing restores the key order too."""
        self.touch_key(node, key)
        _, keys, full = self.dicts[id(node)]
        if full is None:
            full = dict.copy(node)
            for k, old in keys.items():  # back to what it held before this call (an added key is last)
                if old is _MISSING:
                    full.pop(k, None)
                else:
                    full[k] = old
            self.dicts[id(node)] = (node, keys, full)

    def touch_list(self, node: TList, appending: bool = False) -> None:
        entry = self.lists.get(id(node))
        if entry is None:
            self.lists[id(node)] = (node, len(node), None if appending else list(list.__iter__(node)))
        elif entry[2] is None and not appending:
            self.lists[id(node)] = (node, entry[1], list(list.__iter__(node))[: entry[1]])

    def touch_set(self, node: TSet) -> None:
        if id(node) not in self.sets:
            self.sets[id(node)] = (node, set(set.__iter__(node)))

    # undo -------------------------------------------------------------------------------------
    def rollback(self) -> None:
        """Put every written node back as it was (O(what was written))."""
        for model, fields, fields_set, extra, private in self.models.values():
            _restore_model(model, fields, fields_set, extra, private)
        for node, keys, full in self.dicts.values():
            _restore_dict(node, keys, full)
        for node, length, full in self.lists.values():
            _restore_list(node, length, full)
        for node, old in self.sets.values():
            set.clear(node)
            set.update(node, old)

    # commit -----------------------------------------------------------------------------------
    def commit(self) -> Commit:
        """The new committed root; the old tree is left exactly as it was. Raises `CannotCommit`
        (with the old tree restored) when a written node cannot be placed."""
        try:
            return self._commit()
        except BaseException:
            self.rollback()
            raise

    def _commit(self) -> Commit:
        freezer = _Freezer()
        changed: dict[int, set[Any]] = {}
        # 1. freeze what the call stored: fresh values become committed; a committed node stored in
        #    a new place is copied there (a committed tree holds each node once)
        for model, fields, _, _, _ in self.models.values():
            current, keys = model.__dict__, changed.setdefault(id(model), set())
            for name, value in current.items():
                if fields.get(name, _MISSING) is not value:
                    keys.add(name)
                    if type(value) not in _LEAVES:
                        current[name] = freezer.freeze(value)  # pyright: ignore[reportIndexIssue]
            extra = model.__pydantic_extra__
            if extra:
                for name, value in extra.items():
                    if type(value) not in _LEAVES and not is_committed(value):
                        extra[name] = freezer.freeze(value)
        for node, before, _ in self.dicts.values():
            keys = changed.setdefault(id(node), set())
            for key, old in before.items():
                value = dict.get(node, key, _MISSING)
                if value is not old:
                    keys.add(key)
                    if value is not _MISSING and type(value) not in _LEAVES:
                        dict.__setitem__(node, key, freezer.freeze(value))
        for node, length, full in self.lists.values():
            keys = changed.setdefault(id(node), set())
            kept = {id(v) for v in full} if full is not None else ()
            start = length if full is None else 0
            for i in range(start, len(node)):
                value = list.__getitem__(node, i)
                if full is not None and i < len(full) and full[i] is value:
                    continue
                keys.add(i)
                if type(value) not in _LEAVES and id(value) not in kept:
                    list.__setitem__(node, i, freezer.freeze(value))
            if full is not None and len(full) > len(node):
                keys.update(range(len(node), len(full)))
        for node, old in self.sets.values():
            for value in list(set.__iter__(node)):
                if type(value) not in _LEAVES and value not in old and not is_committed(value):
                    frozen = freezer.freeze(value)
                    if frozen is not value:
                        set.discard(node, value)
                        set.add(node, frozen)
        # 2. split: each written node's new content goes into a new node, the old content comes back
        commit = Commit(self.root, changed)
        written: list[Any] = []
        for model, fields, fields_set, extra, private in self.models.values():
            commit.add(model, _split_model(model))
            _restore_model(model, fields, fields_set, extra, private)
            written.append(model)
        for node, before, full in self.dicts.values():
            commit.add(node, _new_tracked(TDict, dict.copy(node)))
            _restore_dict(node, before, full)
            written.append(node)
        for node, length, full in self.lists.values():
            commit.add(node, _new_tracked(TList, list.copy(node)))
            _restore_list(node, length, full)
            written.append(node)
        for node, old in self.sets.values():
            commit.add(node, _new_tracked(TSet, set.copy(node)))
            set.clear(node)
            set.update(node, old)
            written.append(node)
        # 3. relink: copy the path from the root down to each new node
        index: dict[int, tuple[Any, Any]] | None = None
        for node in written:
            index = self._relink(node, commit, freezer.placed, index)
        return commit

    def _relink(self, node: Any, commit: Commit, placed: set[int], index: dict | None) -> dict | None:
        new_of = commit.new_of
        while True:
            if id(node) in placed:
                raise CannotCommit(f"a {type(node).__name__} was both changed and stored in a new place")
            new = new_of[id(node)]
            if node is self.root:
                commit.root = new
                return index
            where = self.paths.get(id(node))
            if where is None:
                if index is None:
                    index = self._index()
                where = index.get(id(node))
            if where is None:
                raise CannotCommit(
                    f"a {type(node).__name__} was changed that the call reached by a route the "
                    "transaction does not see"
                )
            parent, key = where
            holder = new_of.get(id(parent))
            if holder is not None:  # the parent was written, or copied already: place the new node
                at = _holds(holder, key, node)
                if at is not _MISSING:
                    _put(holder, at, new)
                    commit.parents[id(new)] = (holder, at)
                    commit.changed.setdefault(id(parent), set()).add(at)
                return index
            at = _holds(parent, key, node)
            if at is _MISSING or not is_committed(parent):
                return index  # not there any more: the call removed it
            copied = _copy_node(parent)  # an unchanged parent on the path: copy it, then its parent...
            _put(copied, at, new)
            commit.add(parent, copied)
            commit.parents[id(new)] = (copied, at)
            commit.changed.setdefault(id(parent), set()).add(at)
            node = parent

    def _index(self) -> dict[int, tuple[Any, Any]]:
        """Where nodes are that no container read recorded: the fields of the models from the root down
        (not into collections), of the models reached through collections, of the models written; and
        the entries of the collections the call iterated."""
        index: dict[int, tuple[Any, Any]] = {}
        todo = [self.root]
        todo += [
            node for node_id, where in self.paths.items() if (node := _node_at(*where, node_id)) is not None
        ]
        todo += [entry[0] for entry in self.models.values()]
        seen: set[int] = set()
        while todo:
            model = todo.pop()
            if id(model) in seen:
                continue
            seen.add(id(model))
            fields = model.__dict__
            for name in _NODE_FIELDS.get(type(model), ()):
                value = fields.get(name)
                if type(value) not in _LEAVES:
                    index.setdefault(id(value), (model, name))
                    if isinstance(value, BaseModel):
                        todo.append(value)
        for container in self.scanned:
            if type(container) is TDict:
                for key, value in dict.items(container):
                    index.setdefault(id(value), (container, key))
            elif type(container) is TList:
                for i, value in enumerate(list.__iter__(container)):
                    index.setdefault(id(value), (container, i))
        return index


def _node_at(parent: Any, key: Any, node_id: int) -> Any:
    """The model a recorded read found at `parent[key]` (a collection), if it is still there."""
    if type(parent) is TDict:
        value = dict.get(parent, key)
    elif type(parent) is TList and type(key) is int and key < len(parent):
        value = list.__getitem__(parent, key)
    else:
        return None
    return value if id(value) == node_id and isinstance(value, BaseModel) else None


def _restore_model(model: BaseModel, fields: dict, fields_set: set, extra: Any, private: Any) -> None:
    object.__setattr__(model, "__dict__", fields)
    marker_set = model.__pydantic_fields_set__
    if type(marker_set) is Committed:
        set.clear(marker_set)
        set.update(marker_set, fields_set)
    object.__setattr__(model, "__pydantic_extra__", extra)
    object.__setattr__(model, "__pydantic_private__", private)


def _restore_dict(node: TDict, keys: dict, full: dict | None) -> None:
    if full is not None:
        dict.clear(node)
        dict.update(node, full)
        return
    for key, old in keys.items():
        if old is _MISSING:
            dict.pop(node, key, None)
        else:
            dict.__setitem__(node, key, old)


def _restore_list(node: TList, length: int, full: list | None) -> None:
    if full is None:
        list.__delitem__(node, slice(length, None))
    else:
        list.__setitem__(node, slice(None), full)


# ------------------------------------------------------------------------------------- sizes


def json_size(value: Any) -> int:
    """Bytes of `value` as compact JSON (pydantic's serialization), cached on committed nodes
    (which never change): a state's size is known without serializing it again."""
    kind = type(value)
    if kind in _TRACKED:
        if value._size < 0:
            value._size = len(pydantic_core.to_json(value))
        return value._size
    if isinstance(value, BaseModel):
        fields = value.__pydantic_fields_set__
        if type(fields) is Committed:
            size = getattr(fields, "size", -1)
            if size < 0:
                size = fields.size = len(pydantic_core.to_json(value))
            return size
    return len(pydantic_core.to_json(value, serialize_unknown=True))


def _cached_size(node: Any) -> int:
    if type(node) in _TRACKED:
        return node._size
    fields = node.__pydantic_fields_set__
    return getattr(fields, "size", -1) if type(fields) is Committed else -1


def _cache_size(node: Any, size: int) -> None:
    if type(node) in _TRACKED:
        node._size = size
    elif type(node.__pydantic_fields_set__) is Committed:
        node.__pydantic_fields_set__.size = size


def _field_size(model: BaseModel, name: str) -> int:
    """Bytes of one field's value as the model serializes it (its declared type decides, e.g. 5.0)."""
    value = model.__dict__.get(name)
    if type(value) is _plain_fields(type(model)).get(name):  # serialized as the value itself
        return len(pydantic_core.to_json(value))
    return len(model.model_dump_json(include={name})) - len(pydantic_core.to_json(name)) - 3


@functools.cache
def _plain_fields(cls: type[BaseModel]) -> dict[str, type]:
    """Fields annotated with a plain scalar type and no serializer of their own: name -> that type."""
    if cls.__pydantic_decorators__.field_serializers or cls.__pydantic_decorators__.model_serializers:
        return {}
    plain = {}
    for name, field in cls.__pydantic_fields__.items():
        if field.annotation in (str, int, bool) and not field.metadata and not field.exclude:
            plain[name] = field.annotation
    return plain


def _entry_size(node: Any, key: Any, value: Any) -> int:
    if value is _MISSING:
        return 0
    if type(node) is TDict:
        return len(pydantic_core.to_json(key)) + 1 + json_size(value)
    return json_size(value)


def _get(node: Any, key: Any) -> Any:
    kind = type(node)
    if kind is TDict:
        return dict.get(node, key, _MISSING)
    if kind is TList:
        return list.__getitem__(node, key) if key < len(node) else _MISSING
    return node.__dict__.get(key, _MISSING)


def _commas(node: Any) -> int:
    return max(len(node) - 1, 0) if type(node) in (TDict, TList) else 0


class Commit:
    """The outcome of a transaction: the new root, and the new nodes it is made of."""

    def __init__(self, old_root: BaseModel, changed: dict[int, set]) -> None:
        self.old_root = old_root
        self.root: BaseModel = old_root
        self.new_of: dict[int, Any] = {}
        """id(old node) -> its new node (written nodes, and the copies on the paths to them)."""
        self.changed = changed
        """id(old node) -> the keys (fields, dict keys, list indexes) whose value differs in its new node."""
        self.parents: dict[int, tuple[Any, Any]] = {}
        """id(new node) -> (its new parent, key): where each new node sits in the new tree."""

        self.olds: dict[int, Any] = {}

    def add(self, old: Any, new: Any) -> None:
        self.new_of[id(old)] = new
        self.olds[id(old)] = old

    def size(self) -> int:
        """The new state's compact JSON size, from the old one's and the sizes of what changed: O(change)
        once the old size is known (it is cached on every committed state)."""
        if self.root is not self.old_root:
            json_size(self.old_root)  # known for every committed state but a freshly loaded one
            self._delta(self.old_root, self.root)
        return json_size(self.root)

    def _delta(self, old: Any, new: Any) -> int:
        """How much bigger `new` (a new node made from `old`) serializes than `old`; the new node's
        size is cached when the old one's was known.

        A model below the root is serialized whole (its own serializer knows its field types); the
        root, a dict or a list count only the entries that changed."""
        is_model = isinstance(new, BaseModel)
        if type(new) is TSet or (is_model and new is not self.root):
            _cache_size(new, -1)
            delta = json_size(new) - json_size(old)
        else:
            delta = _commas(new) - _commas(old)
            for key in self.changed.get(id(old), ()):
                before, after = _get(old, key), _get(new, key)
                if before is not _MISSING and after is not _MISSING and self.new_of.get(id(before)) is after:
                    delta += self._delta(before, after)  # the same node, changed: only its changes count
                elif is_model:
                    delta += _field_size(new, key) - _field_size(old, key)
                else:
                    delta += _entry_size(new, key, after) - _entry_size(old, key, before)
        known = _cached_size(old)
        if known >= 0:
            _cache_size(new, known + delta)
        return delta

    def nodes(self) -> list[tuple[Any, Any]]:
        """(old node, new node) for each new node in the new tree (the root first, when it changed)."""
        found = [(self.old_root, self.root)] if self.root is not self.old_root else []
        for key, new in self.new_of.items():
            if id(new) in self.parents:
                found.append((self.olds[key], new))
        return found


__all__ = [
    "CannotCommit",
    "Commit",
    "Committed",
    "CommittedStateError",
    "TDict",
    "TList",
    "TSet",
    "Transaction",
    "freeze",
    "hook",
    "is_committed",
    "thaw",
]
