"""What ``from mcp.server.fastmcp import FastMCP`` gives a tool file that envreg imports under mcp 2.x.

EnvFactory tool files declare their tools as FastMCP (mcp 1.x) ``@mcp.tool()`` functions around a
module-level object. envreg serves those functions itself (`envreg.adapters.envfactory`), one object
per conversation; mcp 2.x removed `mcp.server.fastmcp`, and the file must import unchanged. While
envreg imports such a file, this module stands at that name: `FastMCP` records what the file declares
(each tool's function, name, description and annotations) and refuses to run a server.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


class Context:
    """The type tool functions may annotate a parameter with; never instantiated here."""


@dataclass
class Declared:
    """One ``@mcp.tool(...)`` as the file declared it."""

    fn: Callable[..., Any]
    name: str
    description: str | None = None
    options: dict[str, Any] = field(default_factory=dict)


class FastMCP:
    """Records the tools, resources and prompts a tool file declares; `run()` refuses (envreg serves it)."""

    def __init__(self, name: str | None = None, instructions: str | None = None, **settings: Any) -> None:
        self.name = name
        self.instructions = instructions
        self.settings = settings
        self.declared: dict[str, Declared] = {}
        self.resources: dict[str, Callable[..., Any]] = {}
        self.prompts: dict[str, Callable[..., Any]] = {}

    @property
    def tools(self) -> dict[str, Callable[..., Any]]:
        """Tool name -> the function, in declaration order."""
        return {name: d.fn for name, d in self.declared.items()}

    def tool(self, name: str | Callable[..., Any] | None = None, *args: Any, **kwargs: Any) -> Any:
        def record(fn: Callable[..., Any], tool_name: str | None = None) -> Callable[..., Any]:
            tool_name = tool_name or kwargs.pop("name", None) or fn.__name__
            description = kwargs.pop("description", None)
            self.declared[tool_name] = Declared(fn, tool_name, description, dict(kwargs))
            return fn

        if callable(name):  # used bare: @mcp.tool
            return record(name)
        return lambda fn: record(fn, name)

    def add_tool(self, fn: Callable[..., Any], name: str | None = None, **kwargs: Any) -> None:
        self.tool(name, **kwargs)(fn)

    def resource(
        self, uri: str, *args: Any, **kwargs: Any
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        def record(fn: Callable[..., Any]) -> Callable[..., Any]:
            self.resources[uri] = fn
            return fn

        return record

    def prompt(
        self, name: str | None = None, *args: Any, **kwargs: Any
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        def record(fn: Callable[..., Any]) -> Callable[..., Any]:
            self.prompts[name or fn.__name__] = fn
            return fn

        return record

    def run(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError(
            f"{self.name or 'this tool file'} is served by envreg (`envreg serve-env`), not by its FastMCP wrappers"
        )
