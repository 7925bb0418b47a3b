"""EnvFactory-format tool files served unchanged as envreg environments.

An EnvFactory environment is one Python module (pydantic scenario models, a class holding the
state with ``load_scenario(dict)`` and ``save_scenario() -> dict``, FastMCP stdio wrappers) and a
metadata JSON (``class_name``, ``description``, ``tools[{name, description, input_schema,
output_schema}]``). envreg serves the class itself: each metadata tool is the class's method of
that name, with the metadata's schemas and description; ``load_scenario`` / ``save_scenario`` are
hidden from the agent and are the control plane's load and dump; every conversation gets its own
object (the original client manager shares one process and one state between conversations).
Arguments reach the method converted by its type hints (a dict becomes the pydantic model it
annotates), as FastMCP would; results become JSON.
"""

from __future__ import annotations

import ast
import copy
import hashlib
import importlib.util
import inspect
import json
import re
import sys
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, get_type_hints

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError

from envreg.adapters.pyclass import ClassEnvironment, Method, class_environment, json_result, no_network
from envreg.env import Environment

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


class ImportProblem(ValueError):
    """The tool file or its metadata cannot be served; the message says what and how to fix it."""


class ToolMeta(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: str
    description: str
    input_schema: dict[str, Any]
    output_schema: dict[str, Any] | None = None


class Metadata(BaseModel):
    """An EnvFactory metadata file (other keys are kept, unused)."""

    model_config = ConfigDict(extra="allow")

    class_name: str
    description: str
    tools: list[ToolMeta]


def read_metadata(path: Path) -> Metadata:
    try:
        return Metadata.model_validate_json(path.read_bytes())
    except (OSError, ValidationError) as exc:
        raise ImportProblem(f"{path}: not an EnvFactory metadata file: {exc}") from None


@contextmanager
def _fastmcp_v1() -> Any:
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
    """Import a tool file unchanged (once per process), its FastMCP wrappers recorded but never served."""
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
    except ImportProblem:
        raise
    except Exception as exc:
        sys.modules.pop(name, None)
        raise ImportProblem(f"importing {path.name} failed: {type(exc).__name__}: {exc}") from None
    _modules[path] = module
    return module


@dataclass(frozen=True)
class ScenarioForm:
    """An EnvFactory object's state: what its ``save_scenario()`` returns; ``load_scenario()`` takes it back."""

    cls: type
    fields = {"scenario": "What the class's save_scenario() returns; its load_scenario() takes it back."}

    def new(self) -> Any:
        return self.cls()

    def dump(self, obj: Any) -> dict[str, Any]:
        with no_network("save_scenario"):
            saved = obj.save_scenario()
        if not isinstance(saved, dict):
            raise ValueError(f"save_scenario() returned a {type(saved).__name__}, not a dict")
        return {"scenario": json_result(saved)}

    def load(self, data: dict[str, Any]) -> Any:
        scenario = data.get("scenario")
        if not isinstance(scenario, dict):
            raise ValueError('the state is {"scenario": <what load_scenario takes>}')
        obj = self.cls()
        try:
            with no_network("load_scenario"):
                obj.load_scenario(copy.deepcopy(scenario))
        except Exception as exc:
            raise ValueError(f"load_scenario refused it: {type(exc).__name__}: {exc}") from None
        return obj


def _converter(fn: Callable[..., Any]) -> Callable[[dict[str, Any]], dict[str, Any]] | None:
    """Arguments converted by the method's type hints (a dict -> the pydantic model it annotates)."""
    try:
        hints = get_type_hints(fn)
    except Exception:
        return None
    params = [p for p in inspect.signature(fn).parameters.values() if p.name != "self"]
    adapters = {p.name: TypeAdapter(hints[p.name]) for p in params if p.name in hints}
    if not adapters:
        return None

    def convert(arguments: dict[str, Any]) -> dict[str, Any]:
        return {k: adapters[k].validate_python(v) if k in adapters else v for k, v in arguments.items()}

    return convert


def kebab(name: str) -> str:
    words = re.findall(r"[A-Z]+(?=[A-Z][a-z]|$)|[A-Z][a-z]*|[a-z0-9]+", name)
    return "-".join(w.lower() for w in words) or "environment"


def environment(
    tool_file: str | Path,
    metadata_file: str | Path,
    *,
    name: str | None = None,
    version: str = "1.0.0",
    domain: str = "general",
    volatile: list[str] | None = None,
) -> Environment:
    """The envreg environment serving an EnvFactory tool file's class with its metadata's tools."""
    tool_file, metadata_file = Path(tool_file), Path(metadata_file)
    meta = read_metadata(metadata_file)
    module = load_module(tool_file)
    cls = getattr(module, meta.class_name, None)
    if not isinstance(cls, type):
        raise ImportProblem(
            f"{tool_file.name} defines no class {meta.class_name!r} (the metadata's class_name)"
        )
    for hook in HIDDEN:
        if not callable(getattr(cls, hook, None)):
            raise ImportProblem(
                f"{meta.class_name} has no {hook}() method: envreg loads and dumps state with it"
            )
    methods = []
    for tool in meta.tools:
        if tool.name in HIDDEN or tool.name.startswith("_"):
            raise ImportProblem(
                f"metadata tool {tool.name!r}: {', '.join(HIDDEN)} and private methods stay hidden"
            )
        fn = getattr(cls, tool.name, None)
        if not callable(fn):
            raise ImportProblem(
                f"metadata tool {tool.name!r} has no method of that name on {meta.class_name}"
            )
        if tool.input_schema.get("type") != "object":
            raise ImportProblem(
                f"metadata tool {tool.name!r}: input_schema must be a JSON Schema of type object"
            )
        methods.append(
            Method(
                tool.name,
                tool.description,
                tool.input_schema,
                tool.output_schema or None,
                convert=_converter(fn),
            )
        )
    return class_environment(
        ClassEnvironment(
            name=name or kebab(meta.class_name),
            form=ScenarioForm(cls),
            methods=methods,
            version=version,
            description=meta.description,
            domain=domain,
            volatile=volatile or [],
        )
    )


ENV_PY = '''"""{class_name}: an EnvFactory tool file ({tool}, {metadata}) served unchanged by envreg.

Generated by `envreg import envfactory`; see envreg/adapters/envfactory.py.
"""

from pathlib import Path

from envreg.adapters.envfactory import environment

HERE = Path(__file__).parent
env = environment(HERE / {tool!r}, HERE / {metadata!r}, name={name!r}, version={version!r}, domain={domain!r})
'''


def write_folder(
    tool_file: Path,
    metadata_file: Path,
    folder: Path,
    *,
    name: str,
    version: str = "1.0.0",
    domain: str = "general",
    seed: dict[str, Any] | None = None,
    scenarios: list[Path] = (),  # type: ignore[assignment]
) -> list[Path]:
    """An environment folder: the tool file and metadata copied byte for byte, env.py, seed.json, scenarios."""
    if tool_file.name == "env.py":
        raise ImportProblem("the tool file cannot be named env.py (the folder's env.py is envreg's)")
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for src in (tool_file, metadata_file):
        dst = folder / src.name
        dst.write_bytes(src.read_bytes())
        written.append(dst)
    meta = read_metadata(metadata_file)
    env_py = folder / "env.py"
    env_py.write_text(
        ENV_PY.format(
            class_name=meta.class_name,
            tool=tool_file.name,
            metadata=metadata_file.name,
            name=name,
            version=version,
            domain=domain,
        )
    )
    written.append(env_py)
    if seed is not None:
        (folder / "seed.json").write_text(json.dumps({"scenario": seed}, indent=2, ensure_ascii=False) + "\n")
        written.append(folder / "seed.json")
    for src in scenarios:
        dst = folder / ("scenarios/rejected" if src.parent.name == "rejected" else "scenarios") / src.name
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_bytes(src.read_bytes())
        written.append(dst)
    return written
