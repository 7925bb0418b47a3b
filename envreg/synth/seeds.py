"""COVERT stage 1's self-evolving seed pool: the requests of accepted trajectories seed later prompts.

With an LLM, a run goes in rounds of chains (`Synthesizer(round_size=...)`). Once a round is done,
the turns of its accepted trajectories join the pool in chain order; QueryGen's articulation prompt
of every later chain shows a few of them as examples of requests that were solved and verified. The
pool is bounded (the newest `size` examples stay) and changes only between rounds, and each chain
draws its examples with a generator seeded by the chain's own seed, so a run is as deterministic
as before: the same seed gives the same trajectories, whatever the concurrency.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from envreg.synth.records import Trajectory


@dataclass
class SeedPool:
    """Examples of accepted requests, each ``{"calls": "env.tool, ...", "query": "..."}``."""

    size: int = 16
    shown: int = 3
    examples: list[dict[str, str]] = field(default_factory=list)

    def add(self, trajectory: Trajectory) -> None:
        """The turns of an accepted trajectory (LLM-written queries only), the oldest examples dropped past `size`."""
        if trajectory.query_source != "llm":
            return
        for turn in trajectory.turns:
            calls = ", ".join(dict.fromkeys(f"{c.env}.{c.tool}" for c in turn.calls))
            self.examples.append({"calls": calls, "query": turn.query})
        del self.examples[: max(0, len(self.examples) - self.size)]

    def sample(self, seed: int) -> list[dict[str, str]]:
        """The examples one chain shows, drawn by its seed."""
        rng = random.Random(f"seed-pool:{seed}")
        return rng.sample(self.examples, min(self.shown, len(self.examples)))

    @staticmethod
    def describe(examples: list[dict[str, Any]]) -> str:
        """Examples as a prompt shows them (empty when there are none)."""
        if not examples:
            return ""
        lines = [f"- ({e['calls']}) {e['query']}" for e in examples]
        return (
            "Requests that were solved and verified for other tasks (for tone and detail only; never copy "
            "their values):\n" + "\n".join(lines) + "\n\n"
        )
