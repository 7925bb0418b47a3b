"""Topology-aware chain sampling over the tool graph (EnvFactory's sampler, with a guarantee).

A chain is an ordered list of tool steps in which every required input of every tool is either
user-providable or produced by an earlier step (bound to that step's output): tools whose
requirements cannot be met within the recursion bound are never placed. Per input:

- an optional input is skipped with probability 0.6;
- an input that is already satisfiable (user-providable, or produced earlier) is taken as it is
  with probability 0.9; otherwise a producer tool is sampled for it, recursively (at most
  `max_depth` levels), so that chains also look up what a user could have said;
- at most `max_envs` environments appear in one chain.

From the start tool the sampler walks the graph breadth first (1-2 successors per tool, or another
tool of the same environment when there is none) until `max_tools`. The same seed gives the same chain.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Literal

from envreg.synth.graph import ToolGraph

SKIP_OPTIONAL = 0.6
TAKE_SATISFIABLE = 0.9


@dataclass(frozen=True, slots=True)
class Binding:
    """Where an input's value comes from: the user (or the initial state), or an earlier step's output."""

    source: Literal["user", "step"]
    step: int | None = None
    output: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "step": self.step, "output": self.output}


@dataclass(slots=True)
class Step:
    tool: str
    bindings: dict[str, Binding] = field(default_factory=dict)

    @property
    def env(self) -> str:
        return self.tool.split("/", 1)[0]

    @property
    def name(self) -> str:
        return self.tool.split("/", 1)[1]


@dataclass(slots=True)
class Chain:
    seed: int
    steps: list[Step]

    @property
    def envs(self) -> list[str]:
        seen: list[str] = []
        for step in self.steps:
            if step.env not in seen:
                seen.append(step.env)
        return seen

    def to_json(self) -> list[dict[str, Any]]:
        return [
            {"tool": s.tool, "bindings": {k: b.to_json() for k, b in sorted(s.bindings.items())}}
            for s in self.steps
        ]


class TopologySampler:
    """Samples chains whose every required input is user-providable or produced earlier."""

    def __init__(
        self,
        graph: ToolGraph,
        *,
        envs: list[str] | None = None,
        max_tools: int = 6,
        max_envs: int = 3,
        max_depth: int = 3,
        skip_optional: float = SKIP_OPTIONAL,
        take_satisfiable: float = TAKE_SATISFIABLE,
    ) -> None:
        self.graph = graph
        self.tools = graph.tools(envs)
        if not self.tools:
            raise ValueError(
                f"the graph has no tools for {envs}: known environments: {', '.join(graph.envs())}"
            )
        self.allowed = set(self.tools)
        self.max_tools = max_tools
        self.max_envs = max_envs
        self.max_depth = max_depth
        self.skip_optional = skip_optional
        self.take_satisfiable = take_satisfiable

    def sample(self, seed: int, start: str | None = None) -> Chain:
        rng = random.Random(seed)
        start = start or rng.choice(self.tools)
        steps: list[Step] = []
        queue = deque([start])
        for _ in range(self.max_tools * 8):
            if not queue or len(steps) >= self.max_tools:
                break
            tool = queue.popleft()
            if any(s.tool == tool for s in steps):
                continue
            placed = self._place(tool, steps, 0, rng, frozenset())
            if placed is None:
                continue
            steps = placed
            used = {s.tool for s in steps}
            nexts = [
                t
                for t in self.graph.successors(tool)
                if t in self.allowed and t not in used and self._fits(steps, t)
            ]
            if nexts:
                queue.extend(rng.sample(nexts, rng.randint(1, min(2, len(nexts)))))
            elif not queue:
                same = [
                    t for t in self.tools if self.graph.env_of(t) == self.graph.env_of(tool) and t not in used
                ]
                if same:
                    queue.append(rng.choice(same))
        return Chain(seed, steps[: self.max_tools])

    # internals ---------------------------------------------------------------------------------
    def _fits(self, steps: list[Step], tool: str, pending: frozenset[str] = frozenset()) -> bool:
        envs = {s.env for s in steps} | {self.graph.env_of(t) for t in (*pending, tool)}
        return len(envs) <= self.max_envs

    def _existing(self, param: str, steps: list[Step]) -> Binding | None:
        """A binding for `param` from what is already there: an earlier producer, else the user."""
        by_tool = {s.tool: i for i, s in enumerate(steps)}
        for output in self.graph.feeders(param):
            tool = self.graph.node(output)["tool_id"]
            if tool in by_tool:
                return Binding("step", by_tool[tool], output)
        if self.graph.node(param)["user_providable"]:
            return Binding("user")
        return None

    def _place(
        self, tool: str, steps: list[Step], depth: int, rng: random.Random, pending: frozenset[str]
    ) -> list[Step] | None:
        """`steps` plus `tool` and the producers it needs, or None; `pending` are tools being placed above."""
        if not self._fits(steps, tool, pending):
            return None
        pending = pending | {tool}
        work = list(steps)
        bindings: dict[str, Binding] = {}
        for param in self.graph.inputs(tool):
            required = self.graph.node(param)["required"]
            if not required and rng.random() < self.skip_optional:
                continue
            existing = self._existing(param, work)
            if existing is not None and rng.random() < self.take_satisfiable:
                bindings[param] = existing
                continue
            bound = None
            if depth < self.max_depth:
                used = {s.tool for s in work}
                candidates = [
                    t
                    for t in self.graph.producers(param)
                    if t not in pending
                    and t in self.allowed
                    and t not in used
                    and self._fits(work, t, pending)
                ]
                rng.shuffle(candidates)
                for prior in candidates[:3]:
                    attempt = self._place(prior, work, depth + 1, rng, pending)
                    if attempt is None:
                        continue
                    index = next(i for i, s in enumerate(attempt) if s.tool == prior)
                    output = next(
                        o for o in self.graph.feeders(param) if self.graph.node(o)["tool_id"] == prior
                    )
                    work, bound = attempt, Binding("step", index, output)
                    break
            bound = bound or existing or self._existing(param, work)
            if bound is not None:
                bindings[param] = bound
            elif required:
                return None
        work.append(Step(tool, bindings))
        return work


def check_chain(graph: ToolGraph, chain: Chain, max_envs: int = 3) -> list[str]:
    """Every way `chain` breaks the sampler's guarantee (empty when it holds)."""
    problems = []
    for i, step in enumerate(chain.steps):
        earlier = {s.tool for s in chain.steps[:i]}
        for param in graph.inputs(step.tool):
            node = graph.node(param)
            produced = any(graph.node(o)["tool_id"] in earlier for o in graph.feeders(param))
            if node["required"] and not (node["user_providable"] or produced):
                problems.append(
                    f"step {i} {step.tool}: required {param} is neither user-providable nor produced earlier"
                )
        for param, binding in step.bindings.items():
            if binding.source == "step":
                if binding.step is None or binding.step >= i:
                    problems.append(f"step {i} {step.tool}: {param} bound to a later step {binding.step}")
                elif binding.output not in graph.feeders(param):
                    problems.append(
                        f"step {i} {step.tool}: {param} bound to {binding.output}, which has no edge to it"
                    )
    if len(chain.envs) > max_envs:
        problems.append(f"{len(chain.envs)} environments in one chain")
    return problems
