"""Snapshots of plain Python objects as canonical JSON, and back, exactly.

A foreign environment class keeps its state in instance attributes: dicts with int keys, sets,
tuples, nested objects that point at each other (a directory and its parent), `random.Random`
generators, timestamps. `dump_object` turns such an object into JSON data with two parts:

- ``public``: the object's public attributes (no leading ``_``), recursively; nested objects are
  written in place, with their own public attributes. Dict keys are sorted and numbers are plain
  JSON numbers, so two objects that Python's ``==`` finds equal (dicts in another insertion order,
  ``25`` and ``25.0``) have the same canonical ``public`` part.
- ``private``: all the rest, needed to rebuild the object exactly: private attributes by the JSON
  Pointer of the object that holds them, the insertion order of dicts and attributes whose order is
  not the sorted one, and which integral numbers are floats.

`load_object` rebuilds the object from that data: dump -> load -> dump gives identical bytes, shared
references (``$ref``, a JSON Pointer into the document) stay shared and cycles stay cycles. Only
classes from the modules the caller allows are instantiated (without running their ``__init__``).
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import enum
import importlib
import math
import random
from collections.abc import Callable, Iterable
from typing import Any

from envreg.canonical import canonical_json

__all__ = ["SnapshotError", "dump_object", "load_object", "public_attributes"]

_TAGS = (
    "$ref",
    "$object",
    "$dict",
    "$tuple",
    "$set",
    "$frozenset",
    "$float",
    "$datetime",
    "$date",
    "$time",
    "$timedelta",
    "$decimal",
    "$bytes",
    "$random",
    "$enum",
)


class SnapshotError(ValueError):
    """The object holds something that has no exact JSON form, or the data is not a valid snapshot."""


def public_attributes(obj: Any) -> dict[str, Any]:
    """The attributes a checker compares: those without a leading underscore."""
    return {k: v for k, v in vars(obj).items() if not k.startswith("_")}


def _escape(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def _type_name(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def _is_plain_mapping(d: dict[Any, Any]) -> bool:
    return all(isinstance(k, str) and not k.startswith("$") for k in d)


# --------------------------------------------------------------------------------------------- dump
class _Dumper:
    def __init__(self) -> None:
        self.seen: dict[int, str] = {}  # id(object) -> pointer where it was written
        self.keep: list[Any] = []  # keeps every seen object alive so that ids stay unique
        self.pending: list[tuple[str, Any]] = []  # objects whose private attributes are still to write
        self.attributes: dict[str, dict[str, Any]] = {}
        self.order: dict[str, list[int]] = {}
        self.floats: list[str] = []

    def value(self, v: Any, at: str) -> Any:
        if v is None or type(v) in (bool, str, int):
            return v
        if type(v) is float:
            if not math.isfinite(v):
                return {"$float": repr(v)}
            if v.is_integer():
                self.floats.append(at)
            return v
        if type(v) in (dict, list, set) or _is_instance_object(v):
            if id(v) in self.seen:
                return {"$ref": self.seen[id(v)]}
            self.seen[id(v)] = at
            self.keep.append(v)
        if type(v) is list:
            return [self.value(item, f"{at}/{i}") for i, item in enumerate(v)]
        if type(v) is dict:
            return self.mapping(v, at)
        if type(v) is tuple:
            return {"$tuple": [self.value(item, f"{at}/$tuple/{i}") for i, item in enumerate(v)]}
        if type(v) in (set, frozenset):
            tag = "$set" if type(v) is set else "$frozenset"
            items = sorted((self.hashable(item, f"{at}/{tag}") for item in v), key=canonical_json)
            return {tag: items}
        return self.scalar(v, at)

    def scalar(self, v: Any, at: str) -> Any:
        if type(v) is dt.datetime:
            if v.tzinfo is not None and not isinstance(v.tzinfo, dt.timezone):
                raise SnapshotError(f"{at}: a datetime with tzinfo {v.tzinfo!r} has no exact JSON form")
            return {"$datetime": v.isoformat()}
        if type(v) is dt.date:
            return {"$date": v.isoformat()}
        if type(v) is dt.time:
            if v.tzinfo is not None and not isinstance(v.tzinfo, dt.timezone):
                raise SnapshotError(f"{at}: a time with tzinfo {v.tzinfo!r} has no exact JSON form")
            return {"$time": v.isoformat()}
        if type(v) is dt.timedelta:
            return {"$timedelta": [v.days, v.seconds, v.microseconds]}
        if type(v) is decimal.Decimal:
            return {"$decimal": str(v)}
        if type(v) is bytes:
            return {"$bytes": base64.b64encode(v).decode()}
        if type(v) is random.Random:
            version, internal, gauss_next = v.getstate()
            return {"$random": [version, list(internal), gauss_next]}
        if isinstance(v, enum.Enum):
            return {"$enum": _type_name(type(v)), "name": v.name}
        if _is_instance_object(v):
            return self.instance(v, at)
        raise SnapshotError(
            f"{at or '/'}: a {type(v).__module__}.{type(v).__qualname__} has no exact JSON form "
            "(supported: JSON values, dict, list, tuple, set, datetime, Decimal, bytes, random.Random, "
            "enums and objects of the allowed classes)"
        )

    def hashable(self, v: Any, at: str) -> Any:
        """A dict key or set member: written in full every time (no `$ref`), never a mutable object."""
        if isinstance(v, tuple):
            return {"$tuple": [self.hashable(item, at) for item in v]}
        if isinstance(v, frozenset):
            return {"$frozenset": sorted((self.hashable(i, at) for i in v), key=canonical_json)}
        if _is_instance_object(v):
            raise SnapshotError(f"{at}: an object used as a dict key or set member has no JSON form")
        if type(v) is float:
            return {"$float": repr(v)}  # tagged in place: a key has no pointer of its own to record
        return self.value(v, at)

    def keep_order(self, at: str, actual: list[Any], canonical: list[Any]) -> None:
        """Record where each entry of `actual` (insertion order) sits in `canonical` (sorted) order."""
        if actual != canonical:
            position = {key: i for i, key in enumerate(canonical)}
            self.order[at] = [position[key] for key in actual]

    def mapping(self, d: dict[Any, Any], at: str) -> Any:
        if _is_plain_mapping(d):
            keys = sorted(d)
            self.keep_order(at, list(d), keys)
            return {k: self.value(d[k], f"{at}/{_escape(k)}") for k in keys}
        encoded = [(canonical_json(enc), enc, k) for k in d for enc in (self.hashable(k, f"{at}/$dict"),)]
        pairs = sorted(encoded, key=lambda p: p[0])
        self.keep_order(at, [text for text, _, _ in encoded], [text for text, _, _ in pairs])
        return {
            "$dict": [[enc, self.value(d[k], f"{at}/$dict/{i}/1")] for i, (_, enc, k) in enumerate(pairs)]
        }

    def instance(self, obj: Any, at: str) -> dict[str, Any]:
        attrs = vars(obj)
        names = sorted(attrs)
        self.keep_order(at, list(attrs), names)
        node: dict[str, Any] = {"$object": _type_name(type(obj))}
        for name in names:
            if not name.startswith("_"):
                node[name] = self.value(attrs[name], f"{at}/{_escape(name)}")
        self.pending.append((at, obj))
        return node

    def private(self) -> None:
        """Write the private attributes of every object seen, including objects first met in them."""
        while self.pending:
            at, obj = self.pending.pop(0)
            private = {k: v for k, v in sorted(vars(obj).items()) if k.startswith("_")}
            if not private:
                continue
            base = f"/private/attributes/{_escape(at)}"
            self.attributes[at] = {k: self.value(v, f"{base}/{_escape(k)}") for k, v in private.items()}


def _is_instance_object(v: Any) -> bool:
    cls = type(v)
    return (
        hasattr(v, "__dict__")
        and not isinstance(v, type | enum.Enum)
        and cls.__module__ not in ("builtins", "types", "functools")
        and not callable(v)
    )


def dump_object(obj: Any) -> dict[str, Any]:
    """The JSON snapshot of `obj` (an instance with a ``__dict__``): ``{"public": ..., "private": ...}``."""
    if not _is_instance_object(obj):
        raise SnapshotError(f"cannot snapshot a {type(obj).__qualname__}: not an instance with attributes")
    dumper = _Dumper()
    root = "/public"
    dumper.seen[id(obj)] = root
    dumper.keep.append(obj)
    public = dumper.instance(obj, root)
    del public["$object"]
    dumper.private()
    private: dict[str, Any] = {"attributes": dumper.attributes}
    if dumper.order:
        private["order"] = dumper.order
    if dumper.floats:
        private["floats"] = sorted(dumper.floats)
    return {"public": public, "private": private}


# --------------------------------------------------------------------------------------------- load
_IN_PROGRESS = object()


class _Loader:
    def __init__(self, data: dict[str, Any], resolve: Callable[[str], type]) -> None:
        self.data = data
        self.resolve = resolve
        private = data.get("private") or {}
        if not isinstance(private, dict):
            raise SnapshotError("private: must be an object")
        self.attributes = private.get("attributes") or {}
        self.order = private.get("order") or {}
        self.floats = set(private.get("floats") or [])
        for name, table in (("attributes", self.attributes), ("order", self.order)):
            if not isinstance(table, dict):
                raise SnapshotError(f"private.{name}: must be an object")
        self.built: dict[str, Any] = {}
        self.objects: set[str] = set()
        self.used_floats: set[str] = set()

    def node_at(self, pointer: str) -> Any:
        """The JSON node a `$ref` points at (only pointers into the document, never into a scalar)."""
        if not pointer.startswith("/"):
            raise SnapshotError(f"$ref {pointer!r}: not a JSON Pointer into the snapshot")
        node: Any = self.data
        for token in pointer[1:].split("/"):
            token = _unescape(token)
            if isinstance(node, dict) and token in node:
                node = node[token]
            elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
                node = node[int(token)]
            else:
                raise SnapshotError(f"$ref {pointer!r}: nothing there")
        return node

    def value(self, node: Any, at: str) -> Any:
        if node is None or isinstance(node, bool | str):
            return node
        if isinstance(node, int):
            if at in self.floats:
                self.used_floats.add(at)
                return float(node)
            return node
        if isinstance(node, float):
            if at in self.floats:
                self.used_floats.add(at)
            return node
        if at in self.built:
            built = self.built[at]
            if built is _IN_PROGRESS:
                raise SnapshotError(f"{at}: an immutable value refers to itself")
            return built
        if isinstance(node, list):
            out: list[Any] = []
            self.built[at] = out
            out.extend(self.value(item, f"{at}/{i}") for i, item in enumerate(node))
            return out
        if not isinstance(node, dict):
            raise SnapshotError(f"{at}: unexpected JSON value {node!r}")
        tag = next((k for k in node if k.startswith("$")), None)
        if tag is None:
            return self.plain_mapping(node, at)
        if tag not in _TAGS:
            raise SnapshotError(f"{at}: unknown tag {tag!r}")
        if tag == "$ref":
            target = node["$ref"]
            if not isinstance(target, str) or len(node) != 1:
                raise SnapshotError(f"{at}: a $ref is an object with one string")
            if target in self.built:
                built = self.built[target]
                if built is _IN_PROGRESS:
                    raise SnapshotError(f"{at}: $ref {target!r} refers to a value still being built")
                return built
            return self.value(self.node_at(target), target)
        if tag == "$object":
            return self.instance(node, at)
        if tag == "$dict":
            return self.tagged_mapping(node, at)
        if tag == "$set":
            out_set: set[Any] = set()
            self.built[at] = out_set
            out_set.update(self.hashable(item, at) for item in self.expect_list(node, tag, at))
            return out_set
        if tag == "$frozenset":
            return self.hashable(node, at)
        if tag == "$tuple":
            self.built[at] = _IN_PROGRESS
            items = [
                self.value(item, f"{at}/$tuple/{i}") for i, item in enumerate(self.expect_list(node, tag, at))
            ]
            self.built[at] = tuple(items)
            return self.built[at]
        return self.scalar(tag, node, at)

    def hashable(self, node: Any, at: str) -> Any:
        """A dict key or set member: written in full (no `$ref`, no pointer of its own)."""
        if isinstance(node, dict) and len(node) == 1:
            tag = next(iter(node))
            if tag == "$tuple":
                return tuple(self.hashable(item, at) for item in self.expect_list(node, tag, at))
            if tag == "$frozenset":
                return frozenset(self.hashable(item, at) for item in self.expect_list(node, tag, at))
            if tag in ("$float", "$datetime", "$date", "$time", "$timedelta", "$decimal", "$bytes"):
                return self.scalar(tag, node, at)
        if isinstance(node, dict) and "$enum" in node:
            return self.scalar("$enum", node, at)
        if node is None or isinstance(node, bool | int | float | str):
            return node
        raise SnapshotError(f"{at}: {node!r} cannot be a dict key or set member")

    @staticmethod
    def expect_list(node: dict[str, Any], tag: str, at: str) -> list[Any]:
        if len(node) != 1 or not isinstance(node[tag], list):
            raise SnapshotError(f"{at}: {tag} holds a list")
        return node[tag]

    def scalar(self, tag: str, node: dict[str, Any], at: str) -> Any:
        raw = node[tag]
        try:
            if tag == "$float":
                return float(raw)
            if tag == "$datetime":
                return dt.datetime.fromisoformat(raw)
            if tag == "$date":
                return dt.date.fromisoformat(raw)
            if tag == "$time":
                return dt.time.fromisoformat(raw)
            if tag == "$timedelta":
                days, seconds, micros = raw
                return dt.timedelta(days=days, seconds=seconds, microseconds=micros)
            if tag == "$decimal":
                return decimal.Decimal(raw)
            if tag == "$bytes":
                return base64.b64decode(raw, validate=True)
            if tag == "$random":
                version, internal, gauss_next = raw
                generator = random.Random()
                generator.setstate((version, tuple(internal), gauss_next))
                return generator
            if tag == "$enum":
                return self.resolve(raw)[node["name"]]
        except SnapshotError:
            raise
        except Exception as exc:
            raise SnapshotError(f"{at}: bad {tag} value {raw!r}: {exc}") from None
        raise SnapshotError(f"{at}: unknown tag {tag!r}")  # pragma: no cover

    def ordered(self, items: list[Any], at: str) -> list[Any]:
        perm = self.order.get(at)
        if perm is None:
            return items
        if not isinstance(perm, list) or sorted(perm) != list(range(len(items))):
            raise SnapshotError(f"private.order[{at!r}]: not an ordering of the {len(items)} entries")
        return [items[i] for i in perm]

    def plain_mapping(self, node: dict[str, Any], at: str) -> dict[str, Any]:
        out: dict[str, Any] = {}
        self.built[at] = out
        for key in self.ordered(sorted(node), at):
            out[key] = self.value(node[key], f"{at}/{_escape(key)}")
        return out

    def tagged_mapping(self, node: dict[str, Any], at: str) -> dict[Any, Any]:
        pairs = self.expect_list(node, "$dict", at)
        out: dict[Any, Any] = {}
        self.built[at] = out
        indexed = list(enumerate(pairs))
        for i, pair in self.ordered(indexed, at):
            if not isinstance(pair, list) or len(pair) != 2:
                raise SnapshotError(f"{at}/$dict/{i}: a [key, value] pair")
            out[self.hashable(pair[0], f"{at}/$dict/{i}/0")] = self.value(pair[1], f"{at}/$dict/{i}/1")
        return out

    def instance(self, node: dict[str, Any], at: str, obj: Any = None) -> Any:
        if obj is None:
            type_name = node.get("$object")
            if not isinstance(type_name, str):
                raise SnapshotError(f"{at}: $object names a class as 'module:QualName'")
            cls = self.resolve(type_name)
            obj = object.__new__(cls)
        self.built[at] = obj
        self.objects.add(at)
        attrs: dict[str, Any] = {}
        for name, child in node.items():
            if name == "$object":
                continue
            if not name.isidentifier() or name.startswith("_"):
                raise SnapshotError(f"{at}: {name!r} is not a public attribute name")
            attrs[name] = child
        private = self.attributes.get(at, {})
        if not isinstance(private, dict) or not all(
            isinstance(k, str) and k.startswith("_") for k in private
        ):
            raise SnapshotError(f"private.attributes[{at!r}]: an object of attributes that start with '_'")
        base = f"/private/attributes/{_escape(at)}"
        names = sorted([*attrs, *private])
        values: dict[str, Any] = {}
        for name in names:
            if name in attrs:
                values[name] = self.value(attrs[name], f"{at}/{_escape(name)}")
            else:
                values[name] = self.value(private[name], f"{base}/{_escape(name)}")
        for name in self.ordered(names, at):
            obj.__dict__[name] = values[name]
        return obj


def _resolver(allowed_modules: Iterable[str]) -> Callable[[str], type]:
    allowed = frozenset(allowed_modules)

    def resolve(type_name: str) -> type:
        module_name, _, qualname = type_name.partition(":")
        if module_name not in allowed or not qualname:
            raise SnapshotError(
                f"class {type_name!r} is not allowed in this snapshot (allowed modules: {', '.join(sorted(allowed))})"
            )
        target: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            target = getattr(target, part, None)
        if not isinstance(target, type) or target.__module__ != module_name:
            raise SnapshotError(f"{type_name!r} is not a class of {module_name}")
        return target

    return resolve


def load_object(data: Any, cls: type, allowed_modules: Iterable[str] = ()) -> Any:
    """Rebuild an instance of `cls` from `dump_object` data; raises `SnapshotError` naming what is wrong.

    `cls.__init__` is not run: the snapshot holds every attribute. Nested objects may only be of
    classes defined in `cls`'s module or in `allowed_modules`.
    """
    if not isinstance(data, dict) or not isinstance(data.get("public"), dict):
        raise SnapshotError('a snapshot is an object with "public" (an object) and "private"')
    if set(data) - {"public", "private"}:
        raise SnapshotError(
            f"unexpected keys {sorted(set(data) - {'public', 'private'})} (only public, private)"
        )
    public = data["public"]
    if "$object" in public:
        raise SnapshotError("public: the root object's class is not written in the snapshot")
    loader = _Loader(data, _resolver({cls.__module__, *allowed_modules}))
    obj = object.__new__(cls)
    loader.instance(public, "/public", obj)
    unused = loader.floats - loader.used_floats
    if unused:
        raise SnapshotError(f"private.floats names pointers that hold no number: {sorted(unused)[:3]}")
    unknown = set(loader.attributes) - loader.objects
    if unknown:
        raise SnapshotError(
            f"private.attributes names objects that are not in the snapshot: {sorted(unknown)[:3]}"
        )
    return obj
