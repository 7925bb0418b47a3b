"""Validate what a call changed, not the whole state.

After a writing call commits (`envreg.env.cow`), the new tree shares every unchanged node with the
old one, which was valid. What is new is validated with the state model's own schema:

- every new model below the root (a changed entity, or one on the path to a change) is validated
  whole, from its dump: its fields, its field validators and its model validators;
- a changed root field is validated with that field's schema (its field validators included), the
  root's own model validators aside; a bare ``int``, ``bool`` or ``str`` field given a value of exactly
  that type is valid as it is;
- a root-level collection (a plain ``dict``/``list``/``set`` field) is validated entry by entry: only
  the entries the call added or replaced, with the item schema.

Values a validator normalizes are stored normalized, as a full revalidation would store them, also
where Python calls the two equal (``1 == True``). The
state model's own model validators (whole-state invariants, which read every entity) run when a
state enters (load, create, reset, a restore of an uploaded snapshot), and after every call when
the environment asks for ``check_state="full"``.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from pydantic import BaseModel
from pydantic_core import SchemaValidator, to_json

from envreg.env.cow import Commit, TDict, TList, TSet, freeze

_CONTAINERS = {"dict": "values_schema", "list": "items_schema", "set": "items_schema"}
_BARE = {"int": int, "bool": bool, "str": str}
"""Core schema types whose bare schema (no constraint, no strictness) takes a value of exactly this type as it is."""
_TRACKED = (TDict, TList, TSet)


def _dump(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump()
    return _any_adapter().dump_python(value)


@cache
def _any_adapter() -> Any:
    from pydantic import TypeAdapter

    return TypeAdapter(Any)


class _ModelSchema:
    """The parts of one model class's core schema that validation of changes needs."""

    def __init__(self, cls: type[BaseModel]) -> None:
        schema = cls.__pydantic_core_schema__
        self.definitions: list[dict] = []
        if schema["type"] == "definitions":
            self.definitions = schema["definitions"]  # pyright: ignore[reportAttributeAccessIssue]
            schema = schema["schema"]
        self.refs = {d["ref"]: d for d in self.definitions if "ref" in d}
        model = self._resolve(schema)  # pyright: ignore[reportArgumentType]
        while model["type"] != "model":
            model = self._resolve(model["schema"])
        self.model = model
        self.config = model.get("config")
        self.fields: dict[str, dict] = model["schema"]["fields"]
        # The model without its model validators. pydantic-core would reuse the class's own validator
        # (with them) for a schema naming the class; a stand-in class only validates assignments.
        stand_in = type(cls.__name__, (), {})
        bare = {k: v for k, v in model.items() if k not in ("ref", "metadata")} | {"cls": stand_in}
        self.root = SchemaValidator(self._wrap(bare), self.config)  # pyright: ignore[reportArgumentType]

    def _resolve(self, schema: dict) -> dict:
        while schema["type"] == "definition-ref":
            schema = self.refs[schema["schema_ref"]]
        return schema

    def _wrap(self, schema: dict) -> dict:
        if not self.definitions:
            return schema
        return {"type": "definitions", "schema": schema, "definitions": self.definitions}

    @cache  # noqa: B019 - one per model class, kept for the process
    def taken_as_is(self, field: str) -> type | None:
        """The type whose values this field's validation would keep as they are (a bare ``int``, ``bool`` or
        ``str`` field: no constraint, validator, strictness or string option), or None."""
        spec = self.fields[field]
        schema = self._resolve(spec["schema"])
        if schema["type"] == "default":
            schema = self._resolve(schema["schema"])
        kind = _BARE.get(schema["type"])
        if kind is None or spec.get("frozen") or schema.keys() - {"type", "metadata", "serialization"}:
            return None
        if kind is str and any(key.startswith("str_") for key in self.config or {}):
            return None
        return kind

    @cache  # noqa: B019 - one per model class, kept for the process
    def items(self, field: str, depth: int) -> tuple[SchemaValidator | None, SchemaValidator | None] | None:
        """(key validator, item validator) for entries `depth` levels down a plain collection field,
        or None when that field must be validated whole (validators, length limits, no plain collection)."""
        schema = self._resolve(self.fields[field]["schema"])
        for _ in range(depth + 1):
            while schema["type"] in ("default", "nullable"):
                schema = self._resolve(schema["schema"])
            key = _CONTAINERS.get(schema["type"])
            if key is None or any(k in schema for k in ("min_length", "max_length", "strict")):
                return None
            keys = schema.get("keys_schema")
            items_schema = self._resolve(schema.get(key, {"type": "any"}))
            schema = items_schema
        keys_validator = SchemaValidator(self._wrap(keys), self.config) if keys is not None else None  # pyright: ignore[reportArgumentType, reportPossiblyUnboundVariable]
        return keys_validator, SchemaValidator(self._wrap(items_schema), self.config)  # pyright: ignore[reportArgumentType, reportPossiblyUnboundVariable]


@cache
def _schema(cls: type[BaseModel]) -> _ModelSchema:
    return _ModelSchema(cls)


def check_changes(commit: Commit) -> None:
    """Validate the new nodes of `commit`; raises `pydantic.ValidationError` (and leaves the new tree
    unpublished) at the first problem. Normalized values replace what the call stored."""
    root = commit.root
    nodes = commit.nodes()
    new_ids = {id(new) for _, new in nodes}
    root_fields: set[str] = set()
    entities: list[BaseModel] = []
    for old, new in nodes:
        if new is root:
            root_fields.update(commit.changed.get(id(old), ()))
        elif isinstance(new, BaseModel):
            entities.append(new)
        else:
            anchor = _anchor(commit, new)
            if anchor is not None and anchor[0] is root:
                _check_entries(commit, old, new, anchor[1], anchor[2], root_fields, new_ids)
    schema = _schema(type(root))
    for field in sorted(root_fields):
        value = root.__dict__[field]
        if type(value) is schema.taken_as_is(field):
            continue  # valid as it is: validation would return it unchanged
        if id(value) in new_ids and isinstance(value, _TRACKED) and schema.items(field, 0) is not None:
            continue  # a plain collection: checked entry by entry above
        before, fields_set, dumped = root.__dict__.copy(), root.__pydantic_fields_set__, _dump(value)
        schema.root.validate_assignment(root, field, dumped)
        validated = root.__dict__[field]
        object.__setattr__(root, "__dict__", before)
        object.__setattr__(root, "__pydantic_fields_set__", fields_set)
        if not _identical(_dump(validated), dumped):
            root.__dict__[field] = freeze(validated)  # pyright: ignore[reportIndexIssue]
    for entity in entities:
        _check_entity(entity)


def _anchor(commit: Commit, node: Any) -> tuple[BaseModel, str, int] | None:
    """(the model a new container belongs to, its field, how many collections down), via new parents."""
    depth = 0
    while True:
        where = commit.parents.get(id(node))
        if where is None:
            return None
        parent, key = where
        if isinstance(parent, BaseModel):
            return parent, key, depth
        node, depth = parent, depth + 1


def _check_entries(
    commit: Commit, old: Any, new: Any, field: str, depth: int, root_fields: set[str], new_ids: set[int]
) -> None:
    plan = _schema(type(commit.root)).items(field, depth)
    if plan is None:
        root_fields.add(field)  # validated whole
        return
    keys_validator, items_validator = plan
    changed = commit.changed.get(id(old), ())
    if type(new) is TSet:
        items = [v for v in set.__iter__(new) if v not in old]
        for value in items:
            validated = items_validator.validate_python(_dump(value))  # pyright: ignore[reportOptionalMemberAccess]
            if not _identical(validated, value):
                set.discard(new, value)
                set.add(new, freeze(validated))
        return
    for key in changed:
        if type(new) is TDict:
            value = dict.get(new, key, _MISSING)
            if value is _MISSING:
                continue
            if keys_validator is not None and key not in old:
                keys_validator.validate_python(key)
        else:
            if key >= len(new):
                continue
            value = list.__getitem__(new, key)  # pyright: ignore[reportArgumentType, reportCallIssue]
        if id(value) in new_ids:
            continue  # a new node itself: checked as its own unit
        dumped = _dump(value)
        validated = items_validator.validate_python(dumped)  # pyright: ignore[reportOptionalMemberAccess]
        if not _identical(_dump(validated), dumped):
            frozen = freeze(validated)
            if type(new) is TDict:
                dict.__setitem__(new, key, frozen)
            else:
                list.__setitem__(new, key, frozen)  # pyright: ignore[reportArgumentType, reportCallIssue]


_MISSING: Any = object()


def _identical(a: Any, b: Any) -> bool:
    """Equal, and written alike as JSON: Python's ``1 == 1.0 == True`` would keep a value that validation
    converted (a ``1`` stored in a ``bool`` field), which JSON writes apart."""
    return a == b and to_json(a, serialize_unknown=True) == to_json(b, serialize_unknown=True)


def _check_entity(entity: BaseModel) -> None:
    """Validate one new model whole, from its dump; store what validation normalized."""
    dumped = entity.model_dump()
    validated = type(entity).model_validate(dumped)
    if not _identical(validated.model_dump(), dumped):
        fresh = freeze(validated)
        object.__setattr__(entity, "__dict__", fresh.__dict__)
