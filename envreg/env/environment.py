"""`Environment`: a named state model plus its tools; `Instance`: one live copy of its state."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Generic, TypeVar, overload

from envreg.env.limits import Limits, state_size
from envreg.env.budgets import Budgets
from envreg.env.state import EnvState
from envreg.env.tool import Tool, ToolAnnotations, ToolError, ToolResult
from envreg.errors import UnknownToolError

logger = logging.getLogger("envreg.env")

S = TypeVar("S", bound=EnvState)
F = TypeVar("F", bound=Callable[..., Any])


class Environment(Generic[S]):
    """A stateful tool-use environment.

    ```python
    env = Environment("calendar", CalendarState, version="1.0.0", domain="office",
                      description="Personal calendar with events and invitations.")

    @env.tool(read_only=True)
    def list_events(state: CalendarState, day: date) -> list[Event]:
        \"\"\"List the events that start on `day`.\"\"\"
    ```
    """

    def __init__(
        self,
        name: str,
        state_model: type[S],
        *,
        version: str,
        domain: str = "general",
        description: str = "",
        volatile: Iterable[str] = (),
        check_state: bool = True,
        limits: Limits | None = None,
        budgets: Budgets | None = None,
    ) -> None:
        if not issubclass(state_model, EnvState):
            raise TypeError(f"{state_model.__name__} must subclass envreg.env.EnvState")
        self.name = name
        self.state_model = state_model
        self.version = version
        self.domain = domain
        self.description = description
        self.volatile = tuple(volatile)
        self.check_state = check_state
        self.limits = limits or Limits()
        self.budgets = budgets
        self.tools: dict[str, Tool] = {}
        self.seed: dict[str, Any] | None = None
        self.folder: Path | None = None

    @overload
    def tool(self, fn: F, /) -> F: ...
    @overload
    def tool(
        self,
        *,
        name: str | None = None,
        read_only: bool = False,
        destructive: bool = False,
        idempotent: bool | None = None,
        open_world: bool = False,
    ) -> Callable[[F], F]: ...
    def tool(
        self,
        fn: F | None = None,
        /,
        *,
        name: str | None = None,
        read_only: bool = False,
        destructive: bool = False,
        idempotent: bool | None = None,
        open_world: bool = False,
    ) -> F | Callable[[F], F]:
        """Register a tool. Read-only tools are idempotent unless told otherwise."""
        annotations = ToolAnnotations(
            read_only=read_only,
            destructive=destructive,
            idempotent=read_only if idempotent is None else idempotent,
            open_world=open_world,
        )

        def register(func: F) -> F:
            tool = Tool.from_function(func, name, annotations)
            if tool.name in self.tools:
                raise ValueError(f"environment {self.name!r} already has a tool named {tool.name!r}")
            self.tools[tool.name] = tool
            return func

        return register(fn) if fn is not None else register

    def get_tool(self, name: str) -> Tool:
        try:
            return self.tools[name]
        except KeyError:
            raise UnknownToolError(name, sorted(self.tools)) from None

    def parse_state(self, data: dict[str, Any] | str | bytes) -> S:
        """Validate a state; raises `pydantic.ValidationError` with every problem (or its size, when over
        `limits.max_state_bytes`)."""
        state = self.state_model.from_json(data)
        self.limits.check_state(state)
        return state

    def initial_state(self) -> S:
        """The environment's seed state (its `seed.json`), or the model's defaults."""
        return self.parse_state(self.seed) if self.seed is not None else self.state_model()

    def instance(self, state: S | dict[str, Any] | None = None) -> Instance[S]:
        """A new live instance, starting from `state` or the seed state."""
        return Instance(self, state)

    def list_tools(self) -> list[dict[str, Any]]:
        """Every tool in MCP wire form, in registration order."""
        return [tool.describe() for tool in self.tools.values()]

    def __repr__(self) -> str:
        return f"<Environment {self.name}:{self.version} tools={len(self.tools)}>"


class Instance(Generic[S]):
    """One isolated copy of an environment's state, and the transactional tool calls on it."""

    def __init__(self, env: Environment[S], state: S | dict[str, Any] | None = None) -> None:
        self.env = env
        self.state: S = env.initial_state() if state is None else self._coerce(state)
        self.calls = 0

    def _coerce(self, state: S | dict[str, Any] | str | bytes) -> S:
        if isinstance(state, self.env.state_model):
            self.env.limits.check_state(state)
            return state.model_copy(deep=True)
        return self.env.parse_state(state)  # type: ignore[arg-type]

    def load_state(self, state: S | dict[str, Any] | str | bytes) -> None:
        """Replace the state; on a validation error (a state over the size limit is one) the old state is kept."""
        self.state = self._coerce(state)

    def reset(self) -> None:
        self.state = self.env.initial_state()

    def call_tool(self, name: str, arguments: dict[str, Any] | None = None) -> ToolResult:
        """Run one tool. Anything it raises leaves the state exactly as it was.

        Raises `UnknownToolError` for a name the environment does not have; every other
        failure (bad arguments, arguments or a resulting state over the environment's size
        limits, `ToolError`, a bug in the tool, a state the model's own validators refuse
        after the call) is an error result. Read-only tools run on the live state without a
        copy: they are trusted not to write.
        """
        tool = self.env.get_tool(name)
        self.calls += 1
        limits = self.env.limits
        if (too_large := limits.argument_problem(arguments)) is not None:
            return ToolResult(error=too_large)
        try:
            kwargs = tool.parse_arguments(arguments)
        except ToolError as exc:
            return ToolResult(error=str(exc))
        read_only = tool.annotations.read_only
        working = self.state if read_only else self.state.model_copy(deep=True)
        try:
            value = tool.fn(working, **kwargs)
            result = tool.to_result(value)
            if not read_only and self.env.check_state:
                working = self.env.state_model.model_validate(working.model_dump())
        except ToolError as exc:
            return ToolResult(error=str(exc) or f"{name} failed")
        except Exception as exc:  # a bug in the tool: roll back and say so, never take the server down
            logger.warning("tool %s raised %s", name, exc, exc_info=True)
            return ToolResult(error=f"{name} failed with an internal error: {type(exc).__name__}: {exc}")
        if not read_only:
            problem = limits.state_problem(state_size(working), "this call would make the state")
            if problem is not None:
                return ToolResult(
                    error=f"Refused: {problem}; nothing was changed. Remove or shorten something first."
                )
        self.state = working
        return result
