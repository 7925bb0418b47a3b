"""Online rollouts: a policy over an OpenAI-compatible endpoint plays tasks in sandboxes, turn by turn.

`Rollouts` is the one episode loop (`envreg eval` and `bench/bench_rollout.py` run on it); `Session`
is one rollout's sandboxes and tools, which the trainer adapters drive from their own loops:
`envreg.rollout.verl` (verl tools and agent loop), `envreg.rollout.trl` (GRPOTrainer's
`environment_factory`) and `envreg.rollout.verifiers` (a verifiers environment), each imported only
when used.
"""

from envreg.rollout.loop import EpisodeOptions, Rollouts, passed
from envreg.rollout.policy import ChatPolicy, Policy, PolicyError, PolicyReply
from envreg.rollout.record import CallRecord, EnvProvenance, EpisodeRecord, TurnRecord
from envreg.rollout.session import Session
from envreg.rollout.task import Task, TaskTurn, read_tasks, scenario_tasks

__all__ = [
    "CallRecord",
    "ChatPolicy",
    "EnvProvenance",
    "EpisodeOptions",
    "EpisodeRecord",
    "Policy",
    "PolicyError",
    "PolicyReply",
    "Rollouts",
    "Session",
    "Task",
    "TaskTurn",
    "TurnRecord",
    "passed",
    "read_tasks",
    "scenario_tasks",
]
