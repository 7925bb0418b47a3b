"""A foreign object's attributes as JSON, and back, exactly: for tool files whose ``load_scenario`` refuses
what their own ``save_scenario`` writes (EnvFactory's release has 13), the state is what the object holds.

JSON values stay as they are; anything else is an object with one ``$`` key naming its kind:
``{"$model": "Job", "fields": {...}, "set": [...]}`` (a pydantic model of the file, rebuilt without
validation: the values it held, even those its validators would refuse), ``{"$object": "Cart", "attrs":
{...}}`` (an instance of a plain class of the file), ``{"$enum": "Status", "value": ...}``, ``$tuple``,
``$set`` / ``$frozenset`` (sorted), ``$defaultdict`` (of a builtin factory), ``$datetime`` / ``$date`` / ``$time`` (ISO), ``$timedelta``
(seconds), ``$decimal``, ``$bytes`` (base64), and ``$dict`` (pairs) for a dict with keys that are not
strings or that start with ``$``. Classes are named by their qualified name in the file's module and only
the file's own classes are rebuilt; anything else (a lock, a file, a function) is `NoJsonForm`.
"""

from __future__ import annotations

import base64
import collections
import datetime as dt
import decimal
import enum
import math
from types import ModuleType
from typing import Any

from pydantic import BaseModel

from envreg.canonical import canonical_json

SCALARS = (str, int, bool, type(None))
FACTORIES = {t.__name__: t for t in (list, dict, set, int, float, str)}
"""The default factories a `defaultdict` may have here."""


class NoJsonForm(ValueError):
    """A value the codec cannot write (or a tagged value it cannot read back)."""


def encode(value: Any, module: ModuleType, where: str = "") -> Any:
    """`value` as JSON data; `module` is the file's (its classes are the only ones named)."""
    kind = type(value)
    if kind in SCALARS:
        return value
    if kind is float:
        if not math.isfinite(value):
            raise NoJsonForm(f"{where or 'a value'} is {value!r}, which JSON cannot hold")
        return value
    if kind is list:
        return [encode(v, module, f"{where}[{i}]") for i, v in enumerate(value)]
    if kind is dict:
        if all(type(k) is str and not k.startswith("$") for k in value):
            return {k: encode(v, module, f"{where}.{k}") for k, v in value.items()}
        pairs = [[encode(k, module, where), encode(v, module, f"{where}[{k!r}]")] for k, v in value.items()]
        return {"$dict": pairs}
    if kind is collections.defaultdict and value.default_factory in FACTORIES.values():
        return {"$defaultdict": value.default_factory.__name__, "items": encode(dict(value), module, where)}
    if kind is tuple:
        return {"$tuple": [encode(v, module, f"{where}[{i}]") for i, v in enumerate(value)]}
    if isinstance(value, set | frozenset):
        items = sorted((encode(v, module, where) for v in value), key=canonical_json)
        return {"$frozenset" if isinstance(value, frozenset) else "$set": items}
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return {f"${type(value).__name__}": value.isoformat()}
    if isinstance(value, dt.timedelta):
        return {"$timedelta": value.total_seconds()}
    if isinstance(value, decimal.Decimal):
        return {"$decimal": str(value)}
    if isinstance(value, bytes):
        return {"$bytes": base64.b64encode(value).decode()}
    name = _own_class(type(value), module, where)
    if isinstance(value, enum.Enum):
        return {"$enum": name, "value": encode(value.value, module, where)}
    if isinstance(value, BaseModel):
        out: dict[str, Any] = {
            "$model": name,
            "fields": encode(dict(vars(value)), module, where),
            "set": sorted(value.model_fields_set),
        }
        if value.__pydantic_extra__:
            out["extra"] = encode(dict(value.__pydantic_extra__), module, where)
        if value.__pydantic_private__:
            out["private"] = encode(dict(value.__pydantic_private__), module, where)
        return out
    if hasattr(value, "__dict__") and not hasattr(type(value), "__slots__"):
        return {"$object": name, "attrs": encode(dict(vars(value)), module, where)}
    raise NoJsonForm(f"{where or 'a value'} is a {type(value).__qualname__}, which has no JSON form")


def _own_class(cls: type, module: ModuleType, where: str) -> str:
    if cls.__module__ != module.__name__ or _resolve(module, cls.__qualname__) is not cls:
        raise NoJsonForm(
            f"{where or 'a value'} is a {cls.__module__}.{cls.__qualname__}: only the file's own classes "
            "can be rebuilt from JSON"
        )
    return cls.__qualname__


def _resolve(module: ModuleType, qualname: str) -> Any:
    found: Any = module
    for part in qualname.split("."):
        found = getattr(found, part, None)
    return found


def decode(data: Any, module: ModuleType) -> Any:
    """The value `encode` wrote; raises `NoJsonForm` for a tag or class it does not know."""
    if isinstance(data, list):
        return [decode(v, module) for v in data]
    if not isinstance(data, dict):
        return data
    tag = next((k for k in data if k.startswith("$")), None)
    if tag is None:
        return {k: decode(v, module) for k, v in data.items()}
    body = data[tag]
    try:
        if tag == "$dict":
            return {decode(k, module): decode(v, module) for k, v in body}
        if tag == "$defaultdict":
            return collections.defaultdict(FACTORIES[body], decode(data["items"], module))
        if tag == "$tuple":
            return tuple(decode(v, module) for v in body)
        if tag in ("$set", "$frozenset"):
            items = (decode(v, module) for v in body)
            return set(items) if tag == "$set" else frozenset(items)
        if tag in ("$datetime", "$date", "$time"):
            return getattr(dt, tag[1:]).fromisoformat(body)
        if tag == "$timedelta":
            return dt.timedelta(seconds=body)
        if tag == "$decimal":
            return decimal.Decimal(body)
        if tag == "$bytes":
            return base64.b64decode(body)
        found = _resolve(module, body)
        if not isinstance(found, type):
            raise NoJsonForm(f"{tag} {body!r}: the file has no such class")
        cls: Any = found
        if tag == "$enum":
            return cls(decode(data["value"], module))
        if tag == "$model":
            return _model(cls, data, module)
        if tag == "$object":
            obj = cls.__new__(cls)
            vars(obj).update(decode(data["attrs"], module))
            return obj
    except (KeyError, TypeError, ValueError) as exc:
        raise NoJsonForm(f"cannot read {tag} back: {type(exc).__name__}: {exc}") from None
    raise NoJsonForm(f"unknown tag {tag!r}")


def _model(cls: type, data: dict[str, Any], module: ModuleType) -> BaseModel:
    if not issubclass(cls, BaseModel):
        raise NoJsonForm(f"$model {cls.__qualname__!r} is not a pydantic model")
    model = cls.model_construct(_fields_set=set(data.get("set", [])), **decode(data["fields"], module))
    if "extra" in data:
        object.__setattr__(model, "__pydantic_extra__", decode(data["extra"], module))
    if "private" in data:
        object.__setattr__(model, "__pydantic_private__", decode(data["private"], module))
    return model
