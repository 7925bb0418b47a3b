"""What ``from mcp.server.fastmcp import FastMCP`` gives a tool file that envreg imports under mcp 2.x.

EnvFactory tool files wrap their class in FastMCP stdio tools (mcp 1.x). envreg serves the class
itself, per conversation, so those wrappers are never run; but mcp 2.x removed
`mcp.server.fastmcp`, and the file must import unchanged. While envreg imports such a file, this
module stands at that name: `FastMCP` records what the file declares and refuses to run a server.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class Context:
    """The type tool functions may annotate a parameter with; never instantiated here."""


class FastMCP:
    """Records the tools, resources and prompts a tool file declares; `run()` refuses (envreg serves it)."""

    def __init__(self, name: str | None = None, instructions: str | None = None, **settings: Any) -> None:
        self.name = name
        self.instructions = instructions
        self.settings = settings
        self.tools: dict[str, Callable[..., Any]] = {}
        self.resources: dict[str, Callable[..., Any]] = {}
        self.prompts: dict[str, Callable[..., Any]] = {}

    def _recorder(
        self, table: dict[str, Callable[..., Any]], key: str | None
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        def record(fn: Callable[..., Any]) -> Callable[..., Any]:
            table[key or fn.__name__] = fn
            return fn

        return record

    def tool(self, name: str | Callable[..., Any] | None = None, *args: Any, **kwargs: Any) -> Any:
        if callable(name):  # used bare: @mcp.tool
            return self._recorder(self.tools, None)(name)
        return self._recorder(self.tools, kwargs.get("name", name))

    def resource(
        self, uri: str, *args: Any, **kwargs: Any
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        return self._recorder(self.resources, uri)

    def prompt(
        self, name: str | None = None, *args: Any, **kwargs: Any
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        return self._recorder(self.prompts, name)

    def run(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError(
            f"{self.name or 'this tool file'} is served by envreg (`envreg serve-env`), not by its FastMCP wrappers"
        )
