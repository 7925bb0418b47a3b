"""Tools: plain functions whose first parameter is the state, described from their type hints."""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, get_type_hints

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, create_model
from pydantic.fields import FieldInfo

from envreg.env.schema import json_schema


class ToolError(Exception):
    """An error the agent can fix (bad argument, missing entity). Reaches it as an `isError` result."""


@dataclass(frozen=True, slots=True)
class ToolAnnotations:
    """Behaviour hints, published as MCP tool annotations."""

    read_only: bool = False
    destructive: bool = False
    idempotent: bool = False
    open_world: bool = False

    def to_mcp(self) -> dict[str, bool]:
        return {
            "readOnlyHint": self.read_only,
            "destructiveHint": self.destructive,
            "idempotentHint": self.idempotent,
            "openWorldHint": self.open_world,
        }


_TEXT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
"""A value as the text an agent sees: compact JSON, Unicode kept."""


@dataclass(slots=True)
class ToolResult:
    """The outcome of one tool call: a value, or an error message for the agent."""

    value: Any = None
    error: str | None = None
    structured: dict[str, Any] | None = None
    rendered: str | None = None  # the text the agent sees when it is not the value's JSON (augmented formats)

    @property
    def is_error(self) -> bool:
        return self.error is not None

    @property
    def text(self) -> str:
        if self.error is not None:
            return self.error
        if self.rendered is not None:
            return self.rendered
        return _TEXT(self.value)

    def to_mcp(self) -> dict[str, Any]:
        """The MCP `CallToolResult` wire form."""
        result: dict[str, Any] = {"content": [{"type": "text", "text": self.text}], "isError": self.is_error}
        if self.structured is not None and not self.is_error:
            result["structuredContent"] = self.structured
        return result


_ARGS_SECTION = re.compile(r"^\s*(Args|Arguments|Parameters):\s*$", re.MULTILINE)
_SECTION = re.compile(r"^\s*(Returns|Raises|Yields|Examples?|Notes?):\s*$", re.MULTILINE)
_PARAM_LINE = re.compile(r"^\s{2,}(\w+)(?:\s*\([^)]*\))?:\s*(.*)$")


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """Split a Google-style docstring into its description and per-parameter descriptions."""
    doc = inspect.cleandoc(doc or "")
    match = _ARGS_SECTION.search(doc)
    if not match:
        end = _SECTION.search(doc)
        return (doc[: end.start()] if end else doc).strip(), {}
    description = doc[: match.start()].strip()
    rest = doc[match.end() :]
    end = _SECTION.search(rest)
    params: dict[str, str] = {}
    current = None
    for line in (rest[: end.start()] if end else rest).splitlines():
        if m := _PARAM_LINE.match(line):
            current = m.group(1)
            params[current] = m.group(2).strip()
        elif current and line.strip():
            params[current] = f"{params[current]} {line.strip()}".strip()
    return description, params


def _error_location(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(part) for part in loc) or "arguments"


def _shown(value: Any, limit: int = 80) -> str:
    """The repr of a bad input, cut short: an error must not echo a huge argument back."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


def format_validation_error(tool: str, exc: ValidationError) -> str:
    """One readable line per problem, each naming the argument at fault."""
    problems = []
    for err in exc.errors(include_url=False):
        where = _error_location(err["loc"])
        if err["type"] == "extra_forbidden":
            problems.append(f"{where}: unexpected argument")
        elif err["type"] == "missing":
            problems.append(f"{where}: missing required argument")
        else:
            problems.append(f"{where}: {err['msg']} (got {_shown(err.get('input'))})")
    return f"Invalid arguments for tool {tool!r}: " + "; ".join(problems)


_EMPTY = inspect.Parameter.empty


@dataclass(frozen=True, slots=True)
class Binder:
    """How named JSON arguments reach a callable: positional-only parameters by position, the rest by name.

    Arguments arrive as a JSON object, so every parameter is named; a parameter may carry any name
    (``state``, ``self``, ``arguments``) without meeting one of the caller's own, since whatever the
    caller passes first (`leading`: the state, an object) goes by position.
    """

    positional: tuple[tuple[str, Any], ...] = ()
    """The positional-only parameters, in order, each with its default (`inspect.Parameter.empty`: none)."""

    @classmethod
    def of(cls, fn: Callable[..., Any], *, skip: int = 0, what: str = "") -> Binder:
        """The binder of `fn`'s parameters after the first `skip`; `TypeError` for ``*args``, which no
        JSON object can name."""
        params = list(inspect.signature(fn).parameters.values())[skip:]
        for param in params:
            if param.kind is param.VAR_POSITIONAL:
                raise TypeError(
                    f"{what or getattr(fn, '__qualname__', fn)}: *{param.name} cannot be served as a tool: "
                    "an agent names every argument (a JSON object); give it named parameters instead"
                )
        return cls(tuple((p.name, p.default) for p in params if p.kind is p.POSITIONAL_ONLY))

    def call(self, fn: Callable[..., Any], leading: tuple[Any, ...], arguments: dict[str, Any]) -> Any:
        """``fn(*leading, ...arguments)``; a positional-only parameter left out before one given gets its default."""
        if not self.positional:
            return fn(*leading, **arguments)
        named = dict(arguments)
        given = [i for i, (name, _) in enumerate(self.positional) if name in named]
        args = list(leading)
        for name, default in self.positional[: given[-1] + 1 if given else 0]:
            if name in named:
                args.append(named.pop(name))
            elif default is _EMPTY:
                raise TypeError(f"missing required argument {name!r}")
            else:
                args.append(default)
        return fn(*args, **named)


@dataclass(frozen=True, slots=True)
class ToolModels:
    """What a tool validates its arguments and results with, and the schemas it publishes."""

    arguments_model: type[BaseModel] | None
    output_adapter: TypeAdapter[Any] | None
    wraps_output: bool
    input_schema: dict[str, Any]
    output_schema: dict[str, Any] | None


def _function_models(name: str, fields: dict[str, Any], returns: Any) -> ToolModels:
    """Pydantic models and JSON schemas of a function tool's arguments and return type."""
    model = create_model(  # type: ignore[call-overload]
        f"{name}_arguments", __config__=ConfigDict(extra="forbid"), **fields
    )
    input_schema = json_schema(model)
    input_schema.pop("title", None)
    output_adapter, output_schema, wraps = None, None, False
    if returns not in (inspect.Signature.empty, None, type(None)):
        output_adapter = TypeAdapter(returns)
        schema = json_schema(output_adapter)
        wraps = schema.get("type") != "object"
        if wraps:
            defs = schema.pop("$defs", None)
            schema = {"type": "object", "properties": {"result": schema}, "required": ["result"]}
            if defs:
                schema["$defs"] = defs
        schema.pop("title", None)
        output_schema = schema
    return ToolModels(model, output_adapter, wraps, input_schema, output_schema)


@dataclass(slots=True)
class Tool:
    """A tool bound to an environment: its function, its argument model and its schemas.

    A function tool builds its pydantic models and schemas on first use (`models`), not when it is
    registered: a server starts without paying for the tools no call uses yet.
    """

    name: str
    fn: Callable[..., Any]
    description: str
    annotations: ToolAnnotations
    build: Callable[[], ToolModels] | None = None
    built: ToolModels | None = None
    binder: Binder = Binder()

    def invoke(self, state: Any, arguments: dict[str, Any]) -> Any:
        """Run the function on `state` with the parsed arguments (whatever their names)."""
        return self.binder.call(self.fn, (state,), arguments)

    @property
    def models(self) -> ToolModels:
        if self.built is None:
            assert self.build is not None, f"tool {self.name!r} has neither models nor a way to build them"
            self.built = self.build()
        return self.built

    @property
    def arguments_model(self) -> type[BaseModel] | None:
        return self.models.arguments_model

    @property
    def output_adapter(self) -> TypeAdapter[Any] | None:
        return self.models.output_adapter

    @property
    def wraps_output(self) -> bool:
        return self.models.wraps_output

    @property
    def input_schema(self) -> dict[str, Any]:
        return self.models.input_schema

    @property
    def output_schema(self) -> dict[str, Any] | None:
        return self.models.output_schema

    @classmethod
    def from_function(cls, fn: Callable[..., Any], name: str | None, annotations: ToolAnnotations) -> Tool:
        tool_name = name or fn.__name__
        description, param_docs = parse_docstring(fn.__doc__)
        if not description:
            raise TypeError(f"tool {tool_name!r} needs a docstring: it is the description the agent reads")
        hints = get_type_hints(fn, include_extras=True)
        params = list(inspect.signature(fn).parameters.values())
        if not params:
            raise TypeError(f"tool {tool_name!r} must take the state as its first parameter")
        fields: dict[str, Any] = {}
        for param in params[1:]:
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                raise TypeError(f"tool {tool_name!r}: *args and **kwargs cannot be described to an agent")
            if param.name not in hints:
                raise TypeError(f"tool {tool_name!r}: parameter {param.name!r} needs a type hint")
            default = param.default if param.default is not param.empty else ...
            described = param_docs.get(param.name)
            if isinstance(default, FieldInfo):
                info = FieldInfo.merge_field_infos(default, description=default.description or described)
            else:
                info = Field(default=default, description=described)
            if not info.description:
                raise TypeError(
                    f"tool {tool_name!r}: describe parameter {param.name!r} in the docstring's Args: section"
                )
            fields[param.name] = (hints[param.name], info)
        returns = hints.get("return", inspect.Signature.empty)
        return cls(
            name=tool_name,
            fn=fn,
            description=description,
            annotations=annotations,
            build=lambda: _function_models(tool_name, fields, returns),
            binder=Binder.of(fn, skip=1, what=f"tool {tool_name!r}"),
        )

    def parse_arguments(self, arguments: dict[str, Any] | None) -> dict[str, Any]:
        """Validate raw JSON arguments; raises `ToolError` naming each bad argument."""
        model = self.arguments_model
        assert model is not None, f"tool {self.name!r} validates its arguments in its own parse_arguments"
        try:
            parsed = model.model_validate(arguments or {})
        except ValidationError as exc:
            raise ToolError(format_validation_error(self.name, exc)) from None
        return {name: getattr(parsed, name) for name in type(parsed).model_fields}

    def to_result(self, value: Any) -> ToolResult:
        """Turn a function's return value into a JSON result (structured when it has a schema)."""
        if self.output_adapter is None:
            return ToolResult(
                value=None if value is None else TypeAdapter(Any).dump_python(value, mode="json")
            )
        data = self.output_adapter.dump_python(value, mode="json")
        structured = {"result": data} if self.wraps_output else data
        return ToolResult(value=data, structured=structured)

    def describe(self) -> dict[str, Any]:
        """The MCP `Tool` wire form."""
        described: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "inputSchema": self.input_schema,
            "annotations": self.annotations.to_mcp(),
        }
        if self.output_schema is not None:
            described["outputSchema"] = self.output_schema
        return described
