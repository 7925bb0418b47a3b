"""Any signature a tool may have reaches its function intact: any parameter name (``state``, ``self``,
``arguments``...), positional-only, keyword-only, defaults; ``*args`` is refused when the tool is made.

Property tests over generated signatures, for both ways a tool is served: an SDK function tool
(`Environment.tool`) and a foreign class's method (`envreg.adapters.pyclass`, which BFCL, EnvFactory and
tau2 go through).
"""

from __future__ import annotations

import keyword
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envreg.adapters.pyclass import ClassEnvironment, Method, class_environment
from envreg.env import Environment, EnvState

# names a caller might use for itself, plus ordinary identifiers
TRICKY = ["state", "self", "arguments", "kwargs", "args", "method", "obj", "fn", "value", "name", "leading"]
NAMES = st.one_of(
    st.sampled_from(TRICKY),
    st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True).filter(
        lambda n: not keyword.iskeyword(n) and n != "this"
    ),
)
KINDS = ("positional_only", "positional_or_keyword", "keyword_only")


@dataclass(frozen=True)
class Param:
    name: str
    kind: str
    default: int | None  # None: required


@st.composite
def signatures(draw: Any) -> list[Param]:
    names = draw(st.lists(NAMES, min_size=0, max_size=6, unique=True))
    params = [Param(n, draw(st.sampled_from(KINDS)), draw(st.none() | st.integers(-5, 5))) for n in names]
    params.sort(key=lambda p: KINDS.index(p.kind))
    # Python's rule: among positional parameters, none without a default after one with a default
    seen_default = False
    fixed = []
    for p in params:
        if p.kind != "keyword_only":
            if p.default is not None:
                seen_default = True
            elif seen_default:
                p = Param(p.name, p.kind, 0)
        fixed.append(p)
    return fixed


def source(first: str, params: list[Param], name: str = "tool") -> str:
    parts = [first]
    kinds = [p.kind for p in params]
    for i, p in enumerate(params):
        if p.kind == "keyword_only" and "*" not in parts:
            parts.append("*")
        parts.append(f"{p.name}: int" + ("" if p.default is None else f" = {p.default}"))
        if p.kind == "positional_only" and (i + 1 == len(params) or kinds[i + 1] != "positional_only"):
            parts.append("/")
    doc = "\n".join(f"        {p.name}: Parameter {p.name}." for p in params)
    body = "{" + ", ".join(f"{p.name!r}: {p.name}" for p in params) + "}"
    return f'def {name}({", ".join(parts)}):\n    """Echo the arguments.\n\n    Args:\n{doc}\n    """\n    return {body}\n'


@st.composite
def calls(draw: Any) -> tuple[list[Param], dict[str, int]]:
    params = draw(signatures())
    arguments = {
        p.name: draw(st.integers(-100, 100)) for p in params if p.default is None or draw(st.booleans())
    }
    return params, arguments


def expected(params: list[Param], arguments: dict[str, int]) -> dict[str, int]:
    return {p.name: arguments.get(p.name, p.default) for p in params}


class Empty(EnvState):
    pass


FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(calls())
def test_an_sdk_tool_gets_every_argument_whatever_its_signature(
    call: tuple[list[Param], dict[str, int]],
) -> None:
    params, arguments = call
    namespace: dict[str, Any] = {"Empty": Empty}
    exec(source("env_state_: Empty", params), namespace)
    env = Environment("sigs", Empty, version="1.0.0")
    env.tool(read_only=True)(namespace["tool"])
    result = env.instance().call_tool("tool", arguments)
    assert not result.is_error, result.error
    assert result.value == expected(params, arguments)


class Echo:
    """A foreign class: its tool method is generated per example."""

    def dump(self) -> dict[str, Any]:
        return {}


@dataclass(frozen=True)
class EchoForm:
    cls: type
    fields = {"data": "nothing"}

    def new(self) -> Any:
        return self.cls()

    def dump(self, obj: Any) -> dict[str, Any]:
        return {"data": {}}

    def load(self, data: dict[str, Any]) -> Any:
        return self.cls()


def foreign_environment(params: list[Param]) -> Any:
    namespace: dict[str, Any] = {}
    exec(source("this", params, name="echo"), namespace)
    cls = type("Generated", (Echo,), {"echo": namespace["echo"]})
    schema = {
        "type": "object",
        "properties": {p.name: {"type": "integer"} for p in params},
        "required": [p.name for p in params if p.default is None],
        "additionalProperties": False,
    }
    return class_environment(
        ClassEnvironment("generated", EchoForm(cls), [Method("echo", "Echo.", schema)], "1.0.0", "Echo.")
    )


@FAST
@given(calls())
def test_a_foreign_method_gets_every_argument_whatever_its_signature(
    call: tuple[list[Param], dict[str, int]],
) -> None:
    params, arguments = call
    result = foreign_environment(params).instance().call_tool("echo", arguments)
    assert not result.is_error, result.error
    assert result.value == expected(params, arguments)


def test_a_parameter_named_state_reaches_a_foreign_method() -> None:
    """tau2 retail's modify_user_address(user_id, address1, address2, city, state, country, zip): the call
    used to fail with "run() got multiple values for argument 'state'"."""
    env = foreign_environment(
        [Param("city", "positional_or_keyword", None), Param("state", "positional_or_keyword", None)]
    )
    result = env.instance().call_tool("echo", {"city": 1, "state": 2})
    assert not result.is_error, result.error
    assert result.value == {"city": 1, "state": 2}


def test_star_args_are_refused_when_the_tool_is_made() -> None:
    namespace: dict[str, Any] = {}
    exec("def echo(self, first, *rest):\n    return {}\n", namespace)
    cls = type("Generated", (Echo,), {"echo": namespace["echo"]})
    method = Method("echo", "Echo.", {"type": "object", "properties": {"first": {}}})
    with pytest.raises(
        ValueError, match=r"Generated.echo: \*rest cannot be served as a tool: an agent names"
    ):
        class_environment(ClassEnvironment("generated", EchoForm(cls), [method], "1.0.0", "Echo."))

    env = Environment("sigs", Empty, version="1.0.0")

    def tool(state: Empty, *values: int) -> None:
        """Take values."""

    with pytest.raises(TypeError, match=r"\*args and \*\*kwargs cannot be described to an agent"):
        env.tool(tool)
