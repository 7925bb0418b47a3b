"""The one JSON Schema generator of the SDK: tool inputs, tool outputs and state schemas.

Environment times are naive (the environment's own clock, ``2026-01-07T13:00:00``). JSON Schema's
``format: date-time`` and ``format: time`` are RFC 3339, which requires an offset, so a naive value
declared that way is refused by every client that checks formats (ajv in the TypeScript MCP SDK, the
MCP Inspector). Here a naive date-time or time is declared as a string with a ``pattern`` and a
description saying it is local and has no offset; a value that may carry an offset or not gets a
pattern with an optional offset; only timezone-aware values keep the RFC 3339 ``format``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, TypeAdapter
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaMode, JsonSchemaValue
from pydantic_core import core_schema

_DATE = r"\d{4}-\d{2}-\d{2}"
_CLOCK = r"\d{2}:\d{2}(:\d{2}(\.\d{1,6})?)?"
_OFFSET = r"(Z|[+-]\d{2}:\d{2})"

NAIVE_DATETIME_PATTERN = f"^{_DATE}T{_CLOCK}$"
DATETIME_PATTERN = f"^{_DATE}T{_CLOCK}{_OFFSET}?$"
NAIVE_TIME_PATTERN = f"^{_CLOCK}$"
TIME_PATTERN = f"^{_CLOCK}{_OFFSET}?$"

_NOTES = {
    NAIVE_DATETIME_PATTERN: "Local date-time without offset (ISO 8601), e.g. 2026-01-07T13:00:00.",
    DATETIME_PATTERN: "ISO 8601 date-time, local (without offset) unless an offset is given.",
    NAIVE_TIME_PATTERN: "Local time of day without offset, e.g. 09:30:00.",
    TIME_PATTERN: "Time of day, local (without offset) unless an offset is given.",
}

TzConstraint = Literal["aware", "naive"] | int | None


class EnvregJsonSchema(GenerateJsonSchema):
    """Pydantic's generator, with honest schemas for naive and possibly-naive times (see the module doc)."""

    def datetime_schema(self, schema: core_schema.DatetimeSchema) -> JsonSchemaValue:
        return self._temporal(super().datetime_schema(schema), schema.get("tz_constraint"), "date-time")

    def time_schema(self, schema: core_schema.TimeSchema) -> JsonSchemaValue:
        return self._temporal(super().time_schema(schema), schema.get("tz_constraint"), "time")

    @staticmethod
    def _temporal(generated: JsonSchemaValue, tz: TzConstraint, kind: str) -> JsonSchemaValue:
        if generated.get("format") != kind or tz == "aware" or isinstance(tz, int):
            return generated  # aware values are RFC 3339; numeric serializations have no format
        if kind == "date-time":
            pattern = NAIVE_DATETIME_PATTERN if tz == "naive" else DATETIME_PATTERN
        else:
            pattern = NAIVE_TIME_PATTERN if tz == "naive" else TIME_PATTERN
        return {"type": "string", "pattern": pattern, "description": _NOTES[pattern]}

    def generate(
        self, schema: core_schema.CoreSchema, mode: JsonSchemaMode = "validation"
    ) -> JsonSchemaValue:
        generated = super().generate(schema, mode)
        _keep_notes(generated)
        return generated


def _keep_notes(node: Any) -> None:
    """A field's own description replaces the type's: append the time note where it was lost."""
    if isinstance(node, dict):
        note = _NOTES.get(node.get("pattern")) if node.get("type") == "string" else None  # pyright: ignore[reportArgumentType]
        description = node.get("description")
        if note and isinstance(description, str) and "offset" not in description:
            sep = " " if description.rstrip().endswith((".", "!", "?")) else ". "
            node["description"] = f"{description.rstrip()}{sep}{note}"
        for value in node.values():
            _keep_notes(value)
    elif isinstance(node, list):
        for value in node:
            _keep_notes(value)


def json_schema(
    model: type[BaseModel] | TypeAdapter[Any], mode: JsonSchemaMode = "validation"
) -> dict[str, Any]:
    """The JSON Schema of a pydantic model or type adapter, made by `EnvregJsonSchema`."""
    if isinstance(model, TypeAdapter):
        return model.json_schema(mode=mode, schema_generator=EnvregJsonSchema)
    return model.model_json_schema(mode=mode, schema_generator=EnvregJsonSchema)
