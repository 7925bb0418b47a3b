"""Authoring SDK: define an environment's state model and tools."""

from envreg.env.environment import Environment, Instance
from envreg.env.integrity import id_problems
from envreg.env.loader import load_environment
from envreg.env.lookup import lookup
from envreg.env.scenario import RejectedState, Scenario, Step, load_scenarios, states_equal
from envreg.env.state import EnvState
from envreg.env.text import fold, matches, words
from envreg.env.tool import Tool, ToolAnnotations, ToolError, ToolResult
from envreg.errors import EnvironmentNotFound, UnknownToolError

__all__ = [
    "EnvState",
    "Environment",
    "EnvironmentNotFound",
    "Instance",
    "RejectedState",
    "Scenario",
    "Step",
    "Tool",
    "ToolAnnotations",
    "ToolError",
    "ToolResult",
    "UnknownToolError",
    "fold",
    "id_problems",
    "load_environment",
    "load_scenarios",
    "lookup",
    "matches",
    "states_equal",
    "words",
]
