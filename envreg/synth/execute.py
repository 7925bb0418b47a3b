"""Execution: sampled chains run in real sandboxes (any tier), turn by turn, and recorded.

For each chain the synthesizer forks one sandbox per environment from a snapshot of the chosen
initial state (the seed, or a scenario's initial state), fills each step's arguments
(`envreg.synth.values`), calls the tool, and records the call, its result and, after every turn,
each environment's full state and its hash. A call that fails is retried with other values (it must
leave the state untouched: that is checked) and, if it keeps failing, the chain ends there. Nothing
in a record is imagined: it is what the sandboxes answered.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import anyio

from envreg.canonical import canonical_json, sha256_hex
from envreg.env import load_environment, states_equal
from envreg.extras import missing_package
from envreg.reward.answer import answer_facts
from envreg.synth.graph import ToolGraph
from envreg.synth.query import template_answer, template_query
from envreg.synth.records import EnvRef, ExecutedCall, Trajectory, Turn
from envreg.synth.sample import Chain, TopologySampler
from envreg.synth.seeds import SeedPool
from envreg.synth.values import ArgumentFiller


def _needing_an_extra(envs: Iterable[str]) -> dict[str, tuple[str, str]]:
    """The environments whose code needs an extra this venv lacks: (what is missing, how to install it)."""
    missing: dict[str, tuple[str, str]] = {}
    for env in envs:
        try:
            load_environment(env)
        except ModuleNotFoundError as exc:
            if (needs := missing_package(exc)) is not None:
                missing[env] = needs
        except Exception:
            pass  # known only as an image, or broken: its sandbox says so when a chain needs it
    return missing


def chain_seed(seed: int, index: int) -> int:
    """The seed of the `index`-th chain of a run: independent of scheduling and concurrency."""
    return int(sha256_hex(f"envreg-synth:{seed}:{index}")[:12], 16)


@dataclass
class InitialState:
    label: str
    state: dict[str, Any]
    snapshot: Any


@dataclass
class EnvContext:
    name: str
    version: str
    manifest_digest: str
    image_digest: str | None
    volatile: list[str]
    initial: list[InitialState] = field(default_factory=list)

    def ref(self) -> EnvRef:
        return EnvRef(
            name=self.name,
            version=self.version,
            manifest_digest=self.manifest_digest,
            image_digest=self.image_digest,
        )


@dataclass
class Skipped:
    index: int
    reason: str


@dataclass
class RunResult:
    trajectories: list[Trajectory]
    skipped: Counter[str]
    attempted: int
    llm_stats: dict[str, int] | None = None
    rejections: Counter[str] = field(default_factory=Counter)  # solved turns rejected, per verification level


class Synthesizer:
    """Samples chains from the graph and executes them in sandboxes of `rt` on one isolation tier."""

    def __init__(
        self,
        rt,
        graph: ToolGraph,
        *,
        isolation: str = "local",
        seed: int = 0,
        envs: list[str] | None = None,
        max_tools: int = 6,
        max_envs: int = 3,
        max_depth: int = 3,
        max_turn_calls: int = 5,
        min_calls: int = 2,
        retries: int = 3,
        initial: str = "mixed",
        llm=None,
        k: int = 3,
        max_user_replies: int = 2,
        round_size: int = 8,
        seed_pool: int = 16,
    ) -> None:
        if initial not in ("seed", "mixed"):
            raise ValueError(
                "initial must be 'seed' or 'mixed' (the seed state and the scenarios' initial states)"
            )
        self.left_out: dict[str, str] = {}
        """The graph's environments this run leaves out, and why: those whose code needs an extra this venv lacks
        (tau2's without `envreg[tau2]`). On every tier: the run reads each one's scenarios and volatile paths
        from its code, here."""
        if missing := _needing_an_extra(graph.envs() if envs is None else envs):
            if envs is not None:
                env, (what, how) = next(iter(missing.items()))
                raise ValueError(f"{env} cannot be synthesized here: its code needs {what} ({how})")
            self.left_out = {env: f"its code needs {what} ({how})" for env, (what, how) in missing.items()}
            envs = [env for env in graph.envs() if env not in missing]
            if not envs:
                raise ValueError(
                    "no environment of the graph can be synthesized here: "
                    + "; ".join(f"{env}: {why}" for env, why in self.left_out.items())
                )
        self.rt = rt
        self.graph = graph
        self.isolation = isolation
        self.seed = seed
        self.sampler = TopologySampler(
            graph, envs=envs, max_tools=max_tools, max_envs=max_envs, max_depth=max_depth
        )
        self.max_turn_calls = max_turn_calls
        self.min_calls = min_calls
        self.retries = retries
        self.initial = initial
        self.llm = llm
        self.k = k
        self.max_user_replies = max_user_replies
        self.round_size = round_size
        self.seed_pool = SeedPool(size=seed_pool)
        self.contexts: dict[str, EnvContext] = {}
        self.failures: Counter[str] = Counter()
        self.rejections: Counter[str] = Counter()
        self._prepare_lock = anyio.Lock()
        self.versions = {e["name"]: e["version"] for e in graph.meta["environments"]}
        self.graph_digest = graph.digest

    # preparation -------------------------------------------------------------------------------
    async def context(self, env: str) -> EnvContext:
        """Snapshots of the initial states of `env` (made once per run), its digests and volatile paths."""
        async with self._prepare_lock:
            if env in self.contexts:
                return self.contexts[env]
            options: list[tuple[str, dict[str, Any] | None]] = [("seed", None)]
            volatile: list[str] = []
            try:
                from envreg.env import load_scenarios

                environment = load_environment(env)
                volatile = list(environment.volatile)
                if self.initial == "mixed" and environment.folder is not None:
                    scenarios, _ = load_scenarios(environment.folder)
                    options += [(f"scenario:{s.name}", s.initial_state) for s in scenarios if s.initial_state]
            except LookupError:
                pass  # an environment known only as an image: its seed state only
            sandbox = await self.rt.sandbox(env, isolation=self.isolation)
            try:
                image = None
                if self.isolation != "local":
                    image = (await self.rt.resolve(env, self.isolation)).key
                ctx = EnvContext(env, self.versions.get(env, ""), sandbox.env_digest, image, volatile)
                for label, state in options:
                    if state is not None:
                        await sandbox.load_state(state)
                    else:
                        await sandbox.reset()
                    snap = await sandbox.snapshot()
                    ctx.initial.append(InitialState(label, snap.state, snap))
            finally:
                await sandbox.close()
            self.contexts[env] = ctx
            return ctx

    # one chain ---------------------------------------------------------------------------------
    async def one(self, index: int) -> Trajectory | Skipped:
        seed = chain_seed(self.seed, index)
        rng = random.Random(seed)
        chain = self.sampler.sample(seed)
        if len(chain.steps) < self.min_calls:
            return Skipped(index, "chain shorter than --min-calls")
        contexts = [await self.context(env) for env in chain.envs]
        chosen = {ctx.name: rng.choice(ctx.initial) for ctx in contexts}
        sandboxes: dict[str, Any] = {}
        try:
            for env, initial in chosen.items():
                (sandboxes[env],) = await self.rt.fork(initial.snapshot, 1, isolation=self.isolation)
            executed = await self._execute(chain, sandboxes, {e: i.state for e, i in chosen.items()}, rng)
        finally:
            with anyio.CancelScope(shield=True):
                for sandbox in sandboxes.values():
                    await sandbox.close()
        if isinstance(executed, str):
            return Skipped(index, executed)
        turns, step_count = executed
        calls_count = sum(len(t.calls) for t in turns)
        if calls_count < self.min_calls:
            return Skipped(index, "fewer successful calls than --min-calls")
        meta: dict[str, Any] = {
            "index": index,
            "chain_seed": seed,
            "chain": chain.to_json(),
            "executed_steps": step_count,
            "isolation": self.isolation,
            "initial_state_source": {e: i.label for e, i in chosen.items()},
            "graph_digest": self.graph_digest,
        }
        trajectory = self._record(index, seed, contexts, chosen, turns, meta)
        if self.llm is not None:
            from envreg.synth.solve import solve_with_llm

            trajectory = await solve_with_llm(self, trajectory, rng)
        return trajectory

    async def _execute(
        self, chain: Chain, sandboxes: dict[str, Any], states: dict[str, dict[str, Any]], rng: random.Random
    ) -> tuple[list[Turn], int] | str:
        filler = ArgumentFiller(self.graph, states, rng, chain.steps)
        sizes: list[int] = []
        while sum(sizes) < len(chain.steps):
            sizes.append(rng.randint(1, self.max_turn_calls))
        results: dict[int, Any] = {}
        turns: list[Turn] = []
        step_index = 0
        stopped = False
        for size in sizes:
            calls: list[ExecutedCall] = []
            for _ in range(size):
                if step_index >= len(chain.steps):
                    break
                step = chain.steps[step_index]
                call = await self._call(step, step_index, sandboxes[step.env], filler, results)
                if isinstance(call, str) and call.startswith("abort:"):
                    return call.removeprefix("abort:")
                if call is None:
                    stopped = True
                    break
                calls.append(call)
                step_index += 1
            if calls:
                turns.append(await self._turn(calls, sandboxes))
            if stopped:
                break
        return turns, step_index

    async def _call(self, step, index: int, sandbox, filler: ArgumentFiller, results: dict[int, Any]):
        before = await sandbox.state_sha256()
        for _ in range(self.retries):
            filled = filler.fill(step, results)
            if filled is None:
                self.failures[f"{step.tool}: {filler.problem or 'a required input had no value'}"] += 1
                return None
            arguments, masked = filled
            result = await sandbox.call_tool(step.name, arguments)
            if not result.is_error:
                results[index] = result.value
                return ExecutedCall(
                    env=step.env, tool=step.name, arguments=arguments, masked=masked, result=result.value
                )
            self.failures[f"{step.tool}: {result.text[:90]}"] += 1
            if await sandbox.state_sha256() != before:
                return f"abort:{step.tool} changed the state although it failed (not transactional)"
        return None

    async def _turn(self, calls: list[ExecutedCall], sandboxes: dict[str, Any]) -> Turn:
        states = {env: await sb.state() for env, sb in sandboxes.items()}
        return Turn(
            query="",
            calls=calls,
            state_sha256={env: sha256_hex(canonical_json(s)) for env, s in states.items()},
            states=states,
        )

    def _record(self, index, seed, contexts, chosen, turns: list[Turn], meta) -> Trajectory:
        initial = {e: i.state for e, i in chosen.items()}
        before = initial
        for turn in turns:
            plain = [c.model_dump() for c in turn.calls]
            turn.query = template_query(self.graph, plain)
            read_only = all(
                states_equal(state, turn.states[env], self.contexts[env].volatile)
                for env, state in before.items()
            )
            turn.facts = answer_facts([c.result for c in turn.calls]) if read_only else []
            turn.answer = template_answer(plain, turn.facts)
            before = turn.states
        final = turns[-1].states
        body = {"seed": self.seed, "index": index, "calls": [c.model_dump() for t in turns for c in t.calls]}
        return Trajectory(
            id="traj_" + sha256_hex(canonical_json(body))[:16],
            seed=self.seed,
            query_source="template",
            envs=[ctx.ref() for ctx in contexts],
            initial_states=initial,
            initial_state_sha256={e: sha256_hex(canonical_json(s)) for e, s in initial.items()},
            turns=turns,
            final_states=final,
            final_state_sha256={e: sha256_hex(canonical_json(s)) for e, s in final.items()},
            snapshot_ids={e: i.snapshot.id for e, i in chosen.items()},
            volatile={ctx.name: ctx.volatile for ctx in contexts if ctx.volatile},
            meta=meta,
        )

    # many chains -------------------------------------------------------------------------------
    async def run(
        self,
        n: int,
        *,
        concurrency: int = 4,
        max_attempts: int | None = None,
        on_result: Callable[[Any], None] | None = None,
    ) -> RunResult:
        """`n` trajectories (the first `n` successful chain indices), `concurrency` chains at a time.

        With an LLM, chains run in rounds of `round_size`; the trajectories a round accepts join the
        seed pool (`envreg.synth.seeds`) before the next round starts.
        """
        limit = max_attempts or n * 10
        done: dict[int, Trajectory | Skipped] = {}
        ok = 0
        step = self.round_size if self.llm is not None else limit

        async def worker(indices: Iterator[int]) -> None:
            nonlocal ok
            for index in indices:
                if ok >= n:
                    return
                outcome = await self.one(index)
                done[index] = outcome
                if isinstance(outcome, Trajectory):
                    ok += 1
                if on_result is not None:
                    on_result(outcome)

        for start in range(0, limit, step):
            indices = iter(range(start, min(limit, start + step)))  # shared: chains are taken in index order
            async with anyio.create_task_group() as tg:
                for _ in range(max(1, concurrency)):
                    tg.start_soon(worker, indices)
            if ok >= n:
                break
            for index in range(start, min(limit, start + step)):
                if isinstance(done.get(index), Trajectory):
                    self.seed_pool.add(done[index])
        trajectories = [o for _, o in sorted(done.items()) if isinstance(o, Trajectory)][:n]
        skipped = Counter(o.reason for o in done.values() if isinstance(o, Skipped))
        return RunResult(
            trajectories,
            skipped,
            len(done),
            self.llm.stats.as_dict() if self.llm else None,
            Counter(self.rejections),
        )
