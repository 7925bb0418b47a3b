"""EnvFactory tool files served as EnvFactory serves them: through their ``@mcp.tool`` functions.

An EnvFactory environment is one Python module: pydantic scenario models, a class holding the state
with ``load_scenario(dict)`` / ``save_scenario() -> dict``, one module-level object of it (``api =
AirlineAPI()``) and FastMCP (mcp 1.x) ``@mcp.tool()`` functions around that object, which are the tools
EnvFactory's agents call: they add defaults, argument checks and result shaping the methods lack. envreg
serves those functions with FastMCP 1.x's contract, written here from its documented behaviour:

- the tool list is the file's: each function's name, its docstring as the description, the input
  schema of a pydantic model of its signature (unannotated parameters are strings), an output schema
  where FastMCP gives one (``-> str`` is ``{"result": string}``; ``-> dict`` has none);
- arguments are checked against that schema (``Input validation error: ...``), JSON written in a
  string for a non-string parameter is parsed, then pydantic validates and converts them (a dict
  becomes the model it annotates; defaults fill what was left out); anything raised is the error
  result ``Error executing tool NAME: ...``;
- a result is rendered as FastMCP renders it (a string as it is, ``None`` as nothing, a list item by
  item, anything else as indented JSON), and the items joined with "," as EnvFactory's client reads them.

The state class is found from the file itself: the class of the module-level object the functions
call (the metadata's ``class_name`` names the file, not the class, in most of EnvFactory's release).
Every call runs under a lock with that global bound to the conversation's own object, rebuilt from
its state by ``load_scenario`` and dumped after by ``save_scenario`` (as the JSON FastMCP would send);
module globals the functions assign (``global _current_session_token``) are part of the state too. So
conversations never share an object (EnvFactory's client shares one process and one object), a
failing call changes nothing, and snapshots hold everything.

The file is imported with `mcp.server.fastmcp` standing in as `envreg.adapters.fastmcp_v1` (mcp 2.x
removed it) and never on the host: ``envreg import envfactory`` inspects it in a container sandbox
(`envreg.sandboxing`, `import_report`), and its image serves it.
"""

from __future__ import annotations

import ast
import copy
import dis
import hashlib
import importlib.util
import inspect
import json
import re
import sys
import threading
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Annotated, Any, ClassVar, get_args, get_origin

import pydantic_core
from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match
from pydantic import BaseModel, ConfigDict, Field, RootModel, ValidationError, WithJsonSchema, create_model
from pydantic.json_schema import GenerateJsonSchema

from envreg.adapters import object_json
from envreg.adapters.pyclass import UNKNOWN_EFFECTS, ClassEnvironment, class_environment, no_network
from envreg.env import Environment, Tool, ToolError, ToolResult
from envreg.env.tool import ToolModels

HIDDEN = ("load_scenario", "save_scenario")
NETWORK_MODULES = (
    "socket",
    "urllib",
    "http.client",
    "requests",
    "httpx",
    "httpx2",
    "aiohttp",
    "ftplib",
    "smtplib",
)
NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")


class ImportProblem(ValueError):
    """The tool file or its metadata cannot be served; the message says what and how to fix it."""


class ToolMeta(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: str
    description: str = ""
    input_schema: dict[str, Any] = Field(default_factory=dict)
    output_schema: dict[str, Any] | None = None


class Metadata(BaseModel):
    """An EnvFactory metadata file (other keys are kept, unused)."""

    model_config = ConfigDict(extra="allow")

    class_name: str
    description: str
    tools: list[ToolMeta] = Field(default_factory=list)


def read_metadata(path: Path) -> Metadata:
    try:
        return Metadata.model_validate_json(path.read_bytes())
    except (OSError, ValidationError) as exc:
        raise ImportProblem(f"{path.name}: not an EnvFactory metadata file: {exc}") from None


def check_name(name: str) -> str:
    """An environment name: lower-case letters, digits and dashes, starting with a letter or digit."""
    if not NAME.match(name):
        raise ImportProblem(
            f"{name!r} is not an environment name: use lower-case letters, digits and '-', starting with a "
            "letter or digit, at most 63 characters (e.g. --name airline-envfactory)"
        )
    return name


def kebab(name: str) -> str:
    words = re.findall(r"[A-Z]+(?=[A-Z][a-z]|$)|[A-Z][a-z]*|[a-z0-9]+", name)
    return "-".join(w.lower() for w in words) or "environment"


# ---------------------------------------------------------------------------------------- the module
@contextmanager
def _fastmcp_v1() -> Iterator[None]:
    """`mcp.server.fastmcp` as a tool file expects it, for the time of its import (mcp 2.x removed it)."""
    try:
        importlib.import_module("mcp.server.fastmcp")
        yield
        return
    except ImportError:
        pass
    from envreg.adapters import fastmcp_v1

    saved = sys.modules.get("mcp.server.fastmcp")
    sys.modules["mcp.server.fastmcp"] = fastmcp_v1
    try:
        yield
    finally:
        if saved is None:
            sys.modules.pop("mcp.server.fastmcp", None)
        else:
            sys.modules["mcp.server.fastmcp"] = saved


def check_syntax(path: Path) -> str:
    """The file's source, once this Python compiles it; else an `ImportProblem` naming the line."""
    source = path.read_text()
    try:
        compile(source, str(path), "exec")
    except SyntaxError as exc:
        version = ".".join(map(str, sys.version_info[:3]))
        raise ImportProblem(
            f"{path.name} line {exc.lineno}: {exc.msg} (this is Python {version}; envreg images run Debian "
            "bookworm's CPython 3.11, so syntax of later Pythons, such as 3.12's `type X = ...` aliases and "
            "`class C[T]` generics, cannot run there: write it the 3.11 way, e.g. `X: TypeAlias = ...`)"
        ) from None
    return source


def network_imports(source: str) -> list[str]:
    """The networking modules a tool file imports (its calls to them are blocked at run time)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        names = (
            [a.name for a in node.names]
            if isinstance(node, ast.Import)
            else [node.module or ""]
            if isinstance(node, ast.ImportFrom)
            else []
        )
        for name in names:
            if any(name == m or name.startswith(m + ".") for m in NETWORK_MODULES):
                found.add(name)
    return sorted(found)


_modules: dict[Path, ModuleType] = {}


def load_module(path: Path) -> ModuleType:
    """Import a tool file unchanged (once per process), its FastMCP declarations recorded, never served."""
    path = path.resolve()
    if path in _modules:
        return _modules[path]
    check_syntax(path)
    stem = re.sub(r"\W", "_", path.stem)
    name = f"envfactory_{stem}_{hashlib.sha256(str(path).encode()).hexdigest()[:8]}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportProblem(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        with _fastmcp_v1(), no_network(f"import of {path.name}"):
            spec.loader.exec_module(module)
    except Exception as exc:
        sys.modules.pop(name, None)
        raise ImportProblem(f"importing {path.name} failed: {type(exc).__name__}: {exc}") from None
    _modules[path] = module
    return module


@dataclass(frozen=True)
class Binding:
    """Where a tool file keeps its state: the module global its tool functions call, and its class."""

    module: ModuleType
    name: str
    cls: type
    #: other module globals the functions assign (``global x``): part of the state, with their start values
    module_state: dict[str, Any]


def _code_objects(code: types.CodeType) -> Iterator[types.CodeType]:
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _code_objects(const)


def _assigned_globals(fn: Callable[..., Any]) -> set[str]:
    code = getattr(fn, "__code__", None)
    if code is None:
        return set()
    return {
        ins.argval
        for c in _code_objects(code)
        for ins in dis.get_instructions(c)
        if ins.opname in ("STORE_GLOBAL", "DELETE_GLOBAL")
    }


def find_binding(module: ModuleType, declared: dict[str, Callable[..., Any]]) -> Binding:
    """The module-level object with ``load_scenario`` / ``save_scenario`` that the tool functions call."""
    candidates = {
        name: value
        for name, value in vars(module).items()
        if not isinstance(value, type)
        and type(value).__module__ == module.__name__
        and all(callable(getattr(value, hook, None)) for hook in HIDDEN)
    }
    called = {n for fn in declared.values() for c in _code_objects(fn.__code__) for n in c.co_names}
    if len(candidates) > 1:
        candidates = {n: v for n, v in candidates.items() if n in called} or candidates
    if len(candidates) != 1:
        found = ", ".join(f"{n} ({type(v).__name__})" for n, v in candidates.items()) or "none"
        raise ImportProblem(
            "the tool functions must call one module-level object whose class has load_scenario() and "
            f"save_scenario() (as `api = AirlineAPI()`); found {found}"
        )
    name, obj = next(iter(candidates.items()))
    assigned = set().union(*(_assigned_globals(fn) for fn in vars(module).values() if inspect.isfunction(fn)))
    if name in assigned:
        raise ImportProblem(
            f"a function of the file replaces the module's {name!r} object: envreg binds it per call"
        )
    state = {n: copy.deepcopy(vars(module).get(n)) for n in sorted(assigned)}
    for n, value in state.items():
        try:
            json.dumps(value)
        except TypeError:
            raise ImportProblem(
                f"the functions keep {n!r} in a module global, holding a {type(value).__name__} that is not "
                "JSON: envreg keeps such globals in the state; keep the value in the class instead"
            ) from None
    return Binding(module, name, type(obj), state)


# -------------------------------------------------------------------------------------- the state
_call_lock = threading.RLock()  # module globals are bound per call: one foreign call at a time


@dataclass
class Live:
    """One conversation's object and the module globals that go with it."""

    obj: Any
    module_state: dict[str, Any]


def as_json(value: Any) -> Any:
    """JSON data as FastMCP sends a value (pydantic's serializer; what it cannot serialize, as str())."""
    return json.loads(pydantic_core.to_json(value, fallback=str))


@dataclass(frozen=True)
class ScenarioForm:
    """An EnvFactory object's state: ``save_scenario()`` as JSON (and the module globals the tools keep)."""

    binding: Binding
    key: ClassVar[str] = "scenario"
    keeps_objects: ClassVar[bool] = True
    """A call works on a copy of the object the state was dumped from, not one reloaded by
    load_scenario: what a reload would change (an integer default of a float field read back as a float)
    stays as EnvFactory's server, which never reloads, has it."""
    about: ClassVar[str] = "What the class's save_scenario() returns; its load_scenario() takes it back."

    @property
    def cls(self) -> type:
        return self.binding.cls

    @property
    def fields(self) -> dict[str, str]:
        fields = {self.key: self.about}
        if self.binding.module_state:
            fields["module"] = "Module globals the tool functions assign: " + ", ".join(
                self.binding.module_state
            )
        return fields

    @property
    def defaults(self) -> dict[str, Any]:
        """A state given without the module globals starts them as the file sets them."""
        return {"module": self.binding.module_state} if self.binding.module_state else {}

    def new(self) -> Live:
        return Live(self.cls(), copy.deepcopy(self.binding.module_state))

    def dump(self, live: Live) -> dict[str, Any]:
        out = {self.key: self.dump_object(live.obj)}
        if self.binding.module_state:
            out["module"] = as_json(live.module_state)
        return out

    def load(self, data: dict[str, Any]) -> Live:
        held = data.get(self.key)
        if not isinstance(held, dict):
            raise ValueError(f'the state is {{"{self.key}": {{...}}}}: {self.about}')
        obj = self.load_object(held)
        module_state = copy.deepcopy(self.binding.module_state)
        given = data.get("module") or {}
        unknown = sorted(set(given) - set(module_state))
        if unknown:
            raise ValueError(f"module: unknown globals {', '.join(unknown)}")
        module_state.update(copy.deepcopy(given))
        return Live(obj, module_state)

    def dump_object(self, obj: Any) -> dict[str, Any]:
        with no_network("save_scenario"):
            saved = obj.save_scenario()
        if not isinstance(saved, dict):
            raise ValueError(f"save_scenario() returned a {type(saved).__name__}, not a dict")
        return as_json(saved)

    def load_object(self, held: dict[str, Any]) -> Any:
        obj = self.cls()
        try:
            with no_network("load_scenario"):
                obj.load_scenario(copy.deepcopy(held))
        except Exception as exc:
            raise ValueError(f"load_scenario refused it: {type(exc).__name__}: {exc}") from None
        return obj


@dataclass(frozen=True)
class AttributeForm(ScenarioForm):
    """An EnvFactory object's state as the attributes it holds (`envreg.adapters.object_json`), for files whose
    ``load_scenario`` refuses what their ``save_scenario`` writes: the object is rebuilt without calling
    either, so it holds exactly what it held (EnvFactory's own server never reloads its object)."""

    key: ClassVar[str] = "attributes"
    keeps_objects: ClassVar[bool] = False  # rebuilt exactly from its JSON
    about: ClassVar[str] = (
        "The object's attributes as JSON (envreg.adapters.object_json); rebuilt as they were."
    )

    def dump_object(self, obj: Any) -> dict[str, Any]:
        try:
            return object_json.encode(dict(vars(obj)), self.binding.module, type(obj).__name__)
        except object_json.NoJsonForm as exc:
            raise ValueError(str(exc)) from None

    def load_object(self, held: dict[str, Any]) -> Any:
        cls: Any = self.cls
        obj = cls.__new__(cls)
        try:
            vars(obj).update(object_json.decode(held, self.binding.module))
        except object_json.NoJsonForm as exc:
            raise ValueError(str(exc)) from None
        return obj


STATE_FORMS: dict[str, type[ScenarioForm]] = {"scenario": ScenarioForm, "attributes": AttributeForm}
"""How an imported file's state is kept: `serve(..., state=...)`; `envreg import envfactory` picks
"attributes" where the object's own save_scenario() output does not load back."""


@contextmanager
def bound(binding: Binding, live: Live) -> Iterator[None]:
    """The module's globals pointing at this conversation's object and values, for the time of one call."""
    namespace = vars(binding.module)
    with _call_lock:
        saved = {n: namespace.get(n) for n in (binding.name, *binding.module_state)}
        namespace[binding.name] = live.obj
        namespace.update(live.module_state)
        try:
            yield
        finally:
            for n in binding.module_state:
                live.module_state[n] = namespace.get(n)
            namespace.update(saved)


# -------------------------------------------------------------------------------------- the tools
class _Strict(GenerateJsonSchema):
    def emit_warning(self, kind: Any, detail: str) -> None:
        raise ValueError(detail)


class _Arguments(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)


@dataclass(frozen=True)
class Signature:
    """A tool function's arguments model and schemas, as FastMCP 1.x derives them."""

    model: type[BaseModel]
    input_schema: dict[str, Any]
    output_model: type[BaseModel] | None
    output_schema: dict[str, Any] | None
    wraps: bool
    strings: frozenset[str]  # parameters annotated str (their string arguments are not JSON-parsed)


def signature_of(fn: Callable[..., Any]) -> Signature:
    sig = inspect.signature(fn, eval_str=True)
    fields: dict[str, Any] = {}
    strings = set()
    for param in sig.parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise ImportProblem(f"tool {fn.__name__!r}: *args and **kwargs cannot be described to an agent")
        annotation = Any if param.annotation is param.empty else param.annotation
        extra: list[Any] = []
        if param.annotation is param.empty:
            extra.append(WithJsonSchema({"title": param.name, "type": "string"}))
        if annotation is str:
            strings.add(param.name)
        name, options = param.name, {}
        if callable(getattr(BaseModel, name, None)):  # a name pydantic's models use: aliased, as FastMCP does
            name, options = f"field_{name}", {"alias": param.name}
        hint = Annotated[(annotation, *extra, Field(**options))]  # type: ignore[valid-type]
        fields[name] = hint if param.default is param.empty else (hint, param.default)
    model = create_model(f"{fn.__name__}Arguments", __base__=_Arguments, **fields)  # type: ignore[call-overload]
    output_model, wraps = _output_model(fn.__name__, sig.return_annotation)
    output_schema = None
    if output_model is not None:
        try:
            output_schema = output_model.model_json_schema(schema_generator=_Strict)
        except Exception:
            output_model, wraps = None, False
    return Signature(
        model, model.model_json_schema(by_alias=True), output_model, output_schema, wraps, frozenset(strings)
    )


def _output_model(name: str, returns: Any) -> tuple[type[BaseModel] | None, bool]:
    """The model FastMCP validates a result with (and whether it wraps it in ``{"result": ...}``)."""
    if returns is inspect.Signature.empty:
        return None, False
    wrapped = (create_model(f"{name}Output", result=(returns, ...)), True)
    if returns is None or returns is type(None):
        return wrapped
    if isinstance(returns, types.GenericAlias):
        args = get_args(returns)
        if get_origin(returns) is dict and len(args) == 2 and args[0] is str:
            return type(f"{name}DictOutput", (RootModel[returns],), {}), False  # type: ignore[valid-type]
        return wrapped
    if isinstance(returns, type):
        if issubclass(returns, BaseModel):
            return returns, False
        if returns in (str, int, float, bool, bytes):
            return wrapped
        return None, False  # a bare `dict`, a class without fields: no structured output
    return wrapped  # typing.Dict[...], Optional[...], unions


def render(value: Any) -> list[str]:
    """The text contents FastMCP makes of a result."""
    if value is None:
        return []
    if isinstance(value, list | tuple):
        return [text for item in value for text in render(item)]
    if isinstance(value, str):
        return [value]
    return [pydantic_core.to_json(value, fallback=str, indent=2).decode()]


@dataclass(slots=True)
class FunctionTool(Tool):
    """One of the file's ``@mcp.tool`` functions, bound per call to the conversation's object."""

    signature: Signature | None = None
    binding: Binding | None = None
    validator: Draft202012Validator | None = None

    def parse_arguments(self, arguments: dict[str, Any] | None) -> dict[str, Any]:
        assert self.signature is not None and self.validator is not None
        arguments = copy.deepcopy(arguments or {})
        error = best_match(self.validator.iter_errors(arguments))
        if error is not None:
            raise ToolError(f"Input validation error: {error.message}")
        for key, value in list(arguments.items()):
            if isinstance(value, str) and key not in self.signature.strings:
                try:
                    parsed = json.loads(value)
                except json.JSONDecodeError:
                    continue
                if not isinstance(parsed, str | int | float):
                    arguments[key] = parsed
        try:
            model = self.signature.model.model_validate(arguments)
        except ValidationError as exc:
            raise ToolError(f"Error executing tool {self.name}: {exc}") from None
        return {(info.alias or name): getattr(model, name) for name, info in type(model).model_fields.items()}

    def to_result(self, value: Any) -> ToolResult:
        assert self.signature is not None
        text = ",".join(render(value))  # EnvFactory's client joins the text contents with ","
        structured = None
        if self.signature.output_model is not None:
            try:
                data = {"result": value} if self.signature.wraps else value
                structured = self.signature.output_model.model_validate(data).model_dump(
                    mode="json", by_alias=True
                )
                if self.output_schema is not None:
                    Draft202012Validator(self.output_schema).validate(structured)
            except Exception as exc:
                return ToolResult(error=f"Output validation error: {exc}")
        return ToolResult(value=as_json(value), structured=structured, rendered=text)


def _runner(name: str, fn: Callable[..., Any], binding: Binding) -> Callable[..., Any]:
    def run(state: Any, /, **arguments: Any) -> Any:
        live = state.live()
        try:
            with bound(binding, live), no_network(name):
                value = fn(**arguments)
        except ToolError:
            raise
        except Exception as exc:  # FastMCP's wording: what EnvFactory's agents were trained on
            raise ToolError(f"Error executing tool {name}: {exc}") from None
        state.store(live)
        return value

    run.__name__ = name
    return run


def function_tool(
    name: str, fn: Callable[..., Any], description: str | None, binding: Binding
) -> FunctionTool:
    signature = signature_of(fn)
    return FunctionTool(
        name=name,
        fn=_runner(name, fn, binding),
        description=description if description is not None else fn.__doc__ or "",
        annotations=UNKNOWN_EFFECTS,
        built=ToolModels(None, None, False, signature.input_schema, signature.output_schema),
        signature=signature,
        binding=binding,
        validator=Draft202012Validator(signature.input_schema),
    )


@dataclass
class Served:
    """What a tool file serves, found from the file."""

    env: Environment
    binding: Binding
    metadata: Metadata
    notes: list[str] = field(default_factory=list)


def serve(
    tool_file: str | Path,
    metadata_file: str | Path,
    *,
    name: str | None = None,
    version: str = "1.0.0",
    domain: str = "general",
    volatile: list[str] | None = None,
    state: str = "scenario",
) -> Served:
    """The environment serving a tool file's ``@mcp.tool`` functions, and what differs from its metadata;
    `state` is the form its state is kept in (`STATE_FORMS`)."""
    if state not in STATE_FORMS:
        raise ImportProblem(f"state={state!r}: the state forms are {', '.join(STATE_FORMS)}")
    tool_file, metadata_file = Path(tool_file), Path(metadata_file)
    meta = read_metadata(metadata_file)
    module = load_module(tool_file)
    server = next((v for v in vars(module).values() if hasattr(v, "declared")), None)
    if server is None or not server.declared:
        raise ImportProblem(
            f"{tool_file.name} declares no tools: expected `mcp = FastMCP(...)` and @mcp.tool() functions"
        )
    declared = {n: d for n, d in server.declared.items() if n not in HIDDEN}
    binding = find_binding(module, {n: d.fn for n, d in server.declared.items()})
    tools = [function_tool(n, d.fn, d.description, binding) for n, d in declared.items()]
    notes = []
    if meta.class_name != binding.cls.__name__:
        notes.append(
            f"the metadata's class_name {meta.class_name!r} is not the state class: serving {binding.cls.__name__} "
            f"(the object `{binding.name}` the tool functions call)"
        )
    listed = {t.name for t in meta.tools}
    if missing := sorted(listed - set(declared) - set(HIDDEN)):
        notes.append(f"metadata tools the file does not serve: {', '.join(missing)}")
    if extra := sorted(set(declared) - listed) if listed else []:
        notes.append(f"served tools the metadata does not list: {', '.join(extra)}")
    if binding.module_state:
        notes.append(f"module globals the tools assign, kept in the state: {', '.join(binding.module_state)}")
    env = class_environment(
        ClassEnvironment(
            name=name or kebab(meta.class_name),
            form=STATE_FORMS[state](binding),
            methods=[],
            version=version,
            description=meta.description,
            domain=domain,
            volatile=volatile or [],
            tools=tools,
        )
    )
    return Served(env, binding, meta, notes)


def environment(tool_file: str | Path, metadata_file: str | Path, **options: Any) -> Environment:
    """The envreg environment serving an EnvFactory tool file (what the generated env.py calls)."""
    return serve(tool_file, metadata_file, **options).env
