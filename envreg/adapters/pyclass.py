"""A Python class with a load method, a dump method and public tool methods, served as an `Environment`.

Foreign environments (BFCL's classes, EnvFactory tool files) keep their state inside an object. The
adapter keeps envreg's contract around them: the envreg state is the JSON the class's state form
dumps (`StateForm`), and every tool call rebuilds the object from that state, runs the method, and
dumps the object again. So a call that raises leaves the state exactly as it was (the SDK's
copy-on-write), nothing survives a call outside the state, snapshots hold everything, and every
tier gives the same results. Arguments are checked against the published input schema (JSON
Schema, strictly) and reach the method as they came; results become JSON.
"""

from __future__ import annotations

import contextvars
import copy
import decimal
import enum
import math
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from jsonschema import Draft202012Validator
from pydantic import Field, NaiveDatetime, PrivateAttr, model_validator
from pydantic.json_schema import SkipJsonSchema

from envreg.canonical import canonical_json
from envreg.env import Environment, EnvState, Tool, ToolAnnotations, ToolError, ToolResult
from envreg.env.state import DEFAULT_EPOCH
from envreg.env.tool import Binder, ToolModels

__all__ = [
    "UNKNOWN_EFFECTS",
    "ForeignState",
    "Method",
    "NetworkBlocked",
    "StateForm",
    "class_environment",
    "json_result",
    "no_network",
]

# A foreign method's effects are not known: MCP's conservative hints, except that it reaches no
# other system (envreg runs it without network).
UNKNOWN_EFFECTS = ToolAnnotations(read_only=False, destructive=True, idempotent=False, open_world=False)


class StateForm(Protocol):
    """How a class's state becomes JSON and back."""

    #: state field name -> description (the fields of the envreg state model)
    fields: dict[str, str]

    @property
    def cls(self) -> type:
        """The class whose methods are the tools."""

    def new(self) -> Any:
        """A fresh instance of the class, in its default state."""

    def dump(self, obj: Any) -> dict[str, Any]:
        """The object's state as JSON data, one entry per field."""

    def load(self, data: dict[str, Any]) -> Any:
        """A new object holding `data`; raises `ValueError` saying what is wrong with it."""


@dataclass(frozen=True, slots=True)
class Method:
    """One public method served as a tool, with the schemas and description the agent sees."""

    name: str
    description: str
    input_schema: dict[str, Any]
    output_schema: dict[str, Any] | None = None
    annotations: ToolAnnotations = UNKNOWN_EFFECTS
    #: turns the validated JSON arguments into the method's keyword arguments (default: as they came)
    convert: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    #: the schema arguments are checked against when it is more lenient than the published one
    #: (BFCL's `--coercion bfcl`: numbers as strings where the method converts them); default: input_schema
    accepts: dict[str, Any] | None = None


class ForeignState(EnvState):
    """The state of a foreign object: what its `StateForm` dumps. envreg's clock and id counters are unused."""

    now: SkipJsonSchema[NaiveDatetime] = Field(default=DEFAULT_EPOCH, exclude=True)
    id_counters: SkipJsonSchema[dict[str, int]] = Field(default_factory=dict, exclude=True)

    form: ClassVar[StateForm]
    _kept: tuple[Any, tuple[Any, ...]] | None = PrivateAttr(default=None)
    """Where the form keeps objects: the object this state was dumped from, and the field values it was
    dumped to (a state whose fields hold other JSON rebuilds its object)."""

    @model_validator(mode="before")
    @classmethod
    def _own_copy(cls, data: Any) -> Any:
        # the state must not share lists or dicts with whoever handed it over
        if isinstance(data, dict):
            data = {**getattr(cls.form, "defaults", {}), **data}  # fields a form fills when left out
            return {k: v if k in ("now", "id_counters") else _copy_json(v) for k, v in data.items()}
        return data

    @model_validator(mode="after")
    def _loads(self) -> ForeignState:
        # The state is what the object holds once it has loaded the data: the control plane's dump
        # is the class's own dump, and a dump that does not load back shows at once.
        try:
            live = self.form.load({name: getattr(self, name) for name in self.form.fields})
            dumped = self.form.dump(live)
        except ValueError as exc:
            raise ValueError(
                f"the {type(self).__name__.removesuffix('State')} object cannot load it: {exc}"
            ) from None
        for name, value in dumped.items():
            self.__dict__[name] = value
        self._keep(live)
        return self

    def live(self) -> Any:
        """A new object holding this state: a copy of the object it was dumped from where the form keeps
        objects (`keeps_objects`: exactly what the object held, as a server that never reloads it has),
        else one rebuilt from the JSON."""
        kept = self._kept
        if kept is not None and all(a is b or a == b for a, b in zip(kept[1], self._fields(), strict=True)):
            try:
                return copy.deepcopy(kept[0])
            except Exception:  # an object that cannot be copied is rebuilt
                pass
        return self.form.load({name: getattr(self, name) for name in self.form.fields})

    def _fields(self) -> tuple[Any, ...]:
        return tuple(self.__dict__.get(name) for name in self.form.fields)

    def _keep(self, obj: Any) -> None:
        if getattr(self.form, "keeps_objects", False):
            self._kept = (obj, self._fields())

    def __deepcopy__(self, memo: dict[int, Any] | None = None) -> ForeignState:
        # The JSON inside is never changed in place (a call replaces it whole, a load copies what it
        # is given), so copies share it: the SDK's copy-on-write costs nothing here.
        return self.model_copy()

    def store(self, obj: Any) -> None:
        """Replace this state with what `obj` holds."""
        for name, value in self.form.dump(obj).items():
            setattr(self, name, value)
        self._keep(obj)


def _copy_json(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy_json(v) for v in value]
    return value


# ------------------------------------------------------------------------------------------ network
class NetworkBlocked(ConnectionError):
    """A foreign method tried to reach the network: environments run without it."""


_guarded: contextvars.ContextVar[str | None] = contextvars.ContextVar("envreg_no_network", default=None)
_NETWORK_EVENTS = frozenset({"socket.connect", "socket.getaddrinfo", "socket.gethostbyname", "socket.sendto"})
_hook_installed = False


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if event in _NETWORK_EVENTS and (tool := _guarded.get()) is not None:
        target = args[1] if event in ("socket.connect", "socket.sendto") and len(args) > 1 else args[:2]
        raise NetworkBlocked(
            f"network call blocked: tool {tool!r} tried to reach {target!r}; "
            "envreg environments run without network (state is the only truth)"
        )


@contextmanager
def no_network(tool: str) -> Iterator[None]:
    """Refuse every socket connection and name lookup made while the block runs (PEP 578 audit hook)."""
    global _hook_installed
    if not _hook_installed:
        sys.addaudithook(_audit)
        _hook_installed = True
    token = _guarded.set(tool)
    try:
        yield
    finally:
        _guarded.reset(token)


# ------------------------------------------------------------------------------------------- results
def json_result(value: Any) -> Any:
    """A method's return value as JSON data (pydantic models, tuples, sets, Decimal and other numbers)."""
    if value is None or isinstance(value, bool | str):
        return value
    if value is Ellipsis:  # Python's `...` in data (BFCL's long-context watch list ends with one)
        return "..."
    if isinstance(value, int) and not isinstance(value, enum.Enum):
        return int(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ToolError(f"the result holds {value!r}, which JSON cannot carry")
        return value
    if isinstance(value, dict):
        return {str(k.value if isinstance(k, enum.Enum) else k): json_result(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_result(v) for v in value]
    if isinstance(value, set | frozenset):
        return sorted((json_result(v) for v in value), key=canonical_json)
    if isinstance(value, enum.Enum):
        return json_result(value.value)
    if hasattr(value, "model_dump"):  # a pydantic model
        return json_result(value.model_dump(mode="json"))
    if isinstance(value, decimal.Decimal) or (hasattr(value, "__float__") and not isinstance(value, str)):
        return json_result(float(value))  # Decimal, mpmath.mpf: the JSON number the schema declares
    if hasattr(value, "isoformat"):
        return value.isoformat()
    raise ToolError(f"the result is a {type(value).__qualname__}, which has no JSON form")


# --------------------------------------------------------------------------------------------- tools
def _argument_problems(tool: str, validator: Draft202012Validator, arguments: dict[str, Any]) -> str | None:
    problems = []
    for err in sorted(validator.iter_errors(arguments), key=lambda e: list(e.absolute_path)):
        where = ".".join(str(p) for p in err.absolute_path)
        if err.validator == "required":
            missing = err.message.split("'")[1] if "'" in err.message else err.message
            problems.append(f"{missing}: missing required argument")
        elif err.validator == "additionalProperties" and not where:
            extra = sorted(set(arguments) - set(validator.schema.get("properties", {})))
            problems += [f"{name}: unexpected argument" for name in extra]
        else:
            problems.append(f"{where or 'arguments'}: {err.message}")
    return f"Invalid arguments for tool {tool!r}: " + "; ".join(problems) if problems else None


@dataclass(slots=True)
class MethodTool(Tool):
    """A tool that runs one method of the object rebuilt from the state.

    Arguments are validated against the published JSON Schema (not a pydantic model: the
    foreign method receives exactly the JSON it was given, as its own harness would pass it).
    """

    validator: Draft202012Validator | None = None
    convert: Callable[[dict[str, Any]], dict[str, Any]] | None = None

    def parse_arguments(self, arguments: dict[str, Any] | None) -> dict[str, Any]:
        arguments = arguments or {}
        assert self.validator is not None
        if problems := _argument_problems(self.name, self.validator, arguments):
            raise ToolError(problems)
        arguments = _copy_json(arguments)
        if self.convert is not None:
            try:
                return self.convert(arguments)
            except ValueError as exc:
                raise ToolError(f"Invalid arguments for tool {self.name!r}: {exc}") from None
        return arguments

    def to_result(self, value: Any) -> ToolResult:
        data = json_result(value)
        structured = data if self.output_schema is not None and isinstance(data, dict) else None
        return ToolResult(value=data, structured=structured)


def _runner(method: str, binder: Binder) -> Callable[..., Any]:
    # the state comes by position: a method parameter may be named `state` (or anything else)
    def run(state: ForeignState, /, **arguments: Any) -> Any:
        obj = state.live()
        with no_network(method):
            value = binder.call(getattr(obj, method), (), arguments)
        state.store(obj)
        return value

    run.__name__ = method
    return run


def method_tool(method: Method, cls: type | None = None) -> MethodTool:
    """The tool serving `method`; with `cls`, its signature is checked (``*args`` is refused) and bound."""
    binder = Binder()
    if cls is not None:
        try:
            binder = Binder.of(getattr(cls, method.name), skip=1, what=f"{cls.__name__}.{method.name}")
        except TypeError as exc:
            raise ValueError(str(exc)) from None
    schema = method.input_schema
    Draft202012Validator.check_schema(schema)
    if method.accepts is not None:
        Draft202012Validator.check_schema(method.accepts)
    if method.output_schema is not None:
        Draft202012Validator.check_schema(method.output_schema)
    return MethodTool(
        name=method.name,
        fn=_runner(method.name, binder),
        description=method.description,
        annotations=method.annotations,
        built=ToolModels(  # arguments are validated by `validator`, not a pydantic model
            arguments_model=None,
            output_adapter=None,
            wraps_output=False,
            input_schema=schema,
            output_schema=method.output_schema,
        ),
        validator=Draft202012Validator(method.accepts or schema),
        convert=method.convert,
    )


@dataclass
class ClassEnvironment:
    """What `class_environment` needs to know about a foreign class."""

    name: str
    form: StateForm
    methods: list[Method]
    version: str
    description: str
    domain: str = "general"
    volatile: list[str] = field(default_factory=list)
    #: tools made some other way (EnvFactory's FastMCP functions), served after the methods
    tools: list[Tool] = field(default_factory=list)


def class_environment(spec: ClassEnvironment) -> Environment:
    """An envreg `Environment` serving the class: its state model, its seed (a fresh object), its tools."""
    from pydantic import create_model

    fields = {
        name: (dict[str, Any], Field(description=description))
        for name, description in spec.form.fields.items()
    }
    title = "".join(part.capitalize() for part in spec.name.replace("_", "-").split("-")) + "State"
    state_model = create_model(title, __base__=ForeignState, **fields)  # type: ignore[call-overload]
    state_model.form = spec.form
    state_model.__doc__ = f"The state of {spec.name}: what the class holds, as JSON."
    env = Environment(
        spec.name,
        state_model,
        version=spec.version,
        domain=spec.domain,
        description=spec.description,
        volatile=spec.volatile,
        check_state=False,  # every call's new state is the dump of the object: the next call loads it
    )
    for method in spec.methods:
        if method.name in env.tools:
            raise ValueError(f"environment {spec.name!r} already has a tool named {method.name!r}")
        env.tools[method.name] = method_tool(method, spec.form.cls)
    for tool in spec.tools:
        if tool.name in env.tools:
            raise ValueError(f"environment {spec.name!r} already has a tool named {tool.name!r}")
        env.tools[tool.name] = tool
    env.seed = spec.form.dump(spec.form.new())
    return env
