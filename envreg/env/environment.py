"""`Environment`: a named state model plus its tools; `Instance`: one live copy of its state."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Generic, Literal, TypeVar, overload

from envreg.env.budgets import Budgets
from envreg.env.changes import check_changes
from envreg.env.cow import (
    CannotCommit,
    Commit,
    CommittedStateError,
    Transaction,
    freeze,
    is_committed,
    json_size,
    thaw,
)
from envreg.env.limits import Limits
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
        check_state: bool | Literal["full"] = True,
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
        """What a writing call validates again: what it changed (True), also the state model's own
        whole-state validators ("full", O(state) per call), or nothing (False)."""
        self.limits = limits or Limits()
        self.budgets = budgets
        self._committed_seed: S | None = None
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
    def tool(  # pyright: ignore[reportInconsistentOverload]
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

    def committed(self, data: dict[str, Any] | str | bytes) -> S:
        """Validate a state and commit it (`envreg.env.cow`): immutable, shareable by any number of instances.

        Its size is checked on the committed state, which keeps it: restoring the state later (a snapshot
        the server keeps) checks the size again without serializing the state."""
        state = freeze(self.state_model.from_json(data))
        self.limits.check_state(state)
        return state

    def committed_seed(self) -> S:
        """The seed state, committed once and shared by every instance that starts from it."""
        if self._committed_seed is None:
            self._committed_seed = freeze(self.initial_state())
        return self._committed_seed  # pyright: ignore[reportReturnType]

    def instance(self, state: S | dict[str, Any] | None = None) -> Instance[S]:
        """A new live instance, starting from `state` or the seed state."""
        return Instance(self, state)

    def list_tools(self) -> list[dict[str, Any]]:
        """Every tool in MCP wire form, in registration order."""
        return [tool.describe() for tool in self.tools.values()]

    def __repr__(self) -> str:
        return f"<Environment {self.name}:{self.version} tools={len(self.tools)}>"


class Instance(Generic[S]):
    """One isolated copy of an environment's state, and the transactional tool calls on it.

    `state` is a committed state (`envreg.env.cow`): immutable, so that snapshots, restores and forks
    share it instead of copying it. Read it freely; it changes only through a writing tool,
    `load_state` or `reset`, each of which installs a new committed state.
    """

    def __init__(self, env: Environment[S], state: S | dict[str, Any] | None = None) -> None:
        self.env = env
        self.state: S = env.committed_seed() if state is None else self._coerce(state)
        self.calls = 0
        self.slow_calls = 0
        """Writing calls that ran on a deep copy because the fast path could not place a write."""

    def _coerce(self, state: S | dict[str, Any] | str | bytes) -> S:
        if isinstance(state, self.env.state_model):
            self.env.limits.check_state(state)
            return state if is_committed(state) else freeze(thaw(state))  # pyright: ignore[reportReturnType]
        return freeze(self.env.parse_state(state))  # type: ignore[arg-type]

    def load_state(self, state: S | dict[str, Any] | str | bytes) -> None:
        """Replace the state (a committed state is shared as it is); on a validation error (a state
        over the size limit is one) the old state is kept."""
        self.state = self._coerce(state)

    def reset(self) -> None:
        self.state = self.env.committed_seed()

    def call_tool(self, name: str, arguments: dict[str, Any] | None = None) -> ToolResult:
        """Run one tool. Anything it raises leaves the state exactly as it was.

        Raises `UnknownToolError` for a name the environment does not have; every other
        failure (bad arguments, arguments or a resulting state over the environment's size
        limits, `ToolError`, a bug in the tool, a change the state model's validators refuse) is
        an error result. A writing tool runs in a transaction on the committed state and costs
        O(what it changes): its writes are journaled, the new state shares every untouched part
        with the old one, and only what changed is validated again (`envreg.env.changes`).
        Read-only tools run on the committed state, which refuses writes.
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
        if tool.annotations.read_only:
            return self._run(tool, self.state, kwargs)
        root = self.state
        txn = Transaction(root)
        with txn:
            result = self._run(tool, root, kwargs)
        if result.is_error:
            txn.rollback()
            return result
        if not txn.wrote:
            return result
        try:
            commit = txn.commit()
        except CannotCommit as exc:
            logger.info("%s: %s; running it again on a copy of the state", name, exc)
            self.slow_calls += 1
            return self._call_on_copy(tool, kwargs)
        try:
            new = self._checked(commit)
        except Exception as exc:  # a change the state model refuses: the old state stays
            return ToolResult(error=f"{name} failed with an internal error: {type(exc).__name__}: {exc}")
        problem = limits.state_problem(commit.size(), "this call would make the state")  # O(change)
        if problem is not None:
            return _refused(problem)
        self.state = new
        return result

    def _run(self, tool: Tool, state: S, kwargs: dict[str, Any]) -> ToolResult:
        try:
            return tool.to_result(tool.invoke(state, kwargs))
        except ToolError as exc:
            return ToolResult(error=str(exc) or f"{tool.name} failed")
        except CommittedStateError:
            return ToolResult(
                error=f"{tool.name} is declared read-only but changed the state; nothing was changed"
            )
        except Exception as exc:  # a bug in the tool: roll back and say so, never take the server down
            logger.warning("tool %s raised %s", tool.name, exc, exc_info=True)
            return ToolResult(error=f"{tool.name} failed with an internal error: {type(exc).__name__}: {exc}")

    @property
    def size(self) -> int:
        """Bytes of the state as compact JSON: computed once for a loaded state, then kept by each call
        from the sizes of what it changed (`Commit.size`), never by serializing the whole state again."""
        return json_size(self.state)

    def _checked(self, commit: Commit) -> S:
        """The new committed state once what changed is valid (raises otherwise)."""
        check = self.env.check_state
        if check:
            check_changes(commit)
        if check == "full":
            self.env.state_model.model_validate(commit.root.model_dump())
        return commit.root  # type: ignore[return-value]

    def _call_on_copy(self, tool: Tool, kwargs: dict[str, Any]) -> ToolResult:
        """The slow way, always right: run the tool on a deep copy, validate the whole result."""
        working = thaw(self.state)
        result = self._run(tool, working, kwargs)
        if result.is_error:
            return result
        try:
            if self.env.check_state:
                working = self.env.state_model.model_validate(working.model_dump())
        except Exception as exc:
            return ToolResult(error=f"{tool.name} failed with an internal error: {type(exc).__name__}: {exc}")
        problem = self.env.limits.state_problem(json_size(working), "this call would make the state")
        if problem is not None:
            return _refused(problem)
        self.state = freeze(working)
        return result


def _refused(problem: str) -> ToolResult:
    return ToolResult(error=f"Refused: {problem}; nothing was changed. Remove or shorten something first.")
