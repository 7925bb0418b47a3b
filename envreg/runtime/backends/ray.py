"""The Ray backend: environment servers in hardened containers on every node of a Ray cluster.

``Runtime(backend="ray", address="auto")`` connects to the cluster (or starts a local Ray when none is
given and none runs) and starts one `NodeAgent` actor per node that hosts sandboxes, pinned to it. Each
agent drives its node's Docker engine with the Docker backend (hardening, internal network, keeper,
death events) and serves a proxy port on the node's cluster address, so the runtime and its gateway
reach containers on any node without reaching their networks (`ray_proxy`).

Placement: a new server goes to the node with the most free capacity (capacity: the node's
``envreg_servers`` Ray resource, or its memory over the container memory limit when no node declares
one). When every node is full, `LimitReached`.

Node loss: an agent that dies (`ActorDiedError`) or stops answering for `lost_after` seconds marks its
node lost: every server on it is reported dead at once, each sandbox ending with `SandboxGone` naming
the node, and new servers go elsewhere. What the lost node left is collected by its engine's keeper
mechanism (`envreg gc` on that node once it is back); on close, the remaining agents also sweep what
the lost agents left on engines they share.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import logging
import secrets
import socket
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx2

from envreg.errors import BadRequest, EngineError, EnvregError, LimitReached
from envreg.runtime.backends.base import Backend, EnvSpec, Server, Upstream
from envreg.runtime.backends.docker import Limits, check_reference
from envreg.runtime.backends.ray_node import NodeAgent, decode_error
from envreg.runtime.backends.ray_proxy import server_path
from envreg.runtime.client import EnvClient

logger = logging.getLogger("envreg.runtime")
NODE_RESOURCE = "envreg_servers"
"""A node's Ray resource that says how many environment servers it may host (`ray start --resources`)."""
SETUP_TIMEOUT = 120.0
CONNECT_TIMEOUT = 5.0
CLOSE_TIMEOUT = 60.0
PROBE_INTERVAL = 0.5


@dataclass(eq=False)
class RayServer(Server):
    """A server on a Ray node: its agent plane is reached through the node's proxy."""

    def upstream(self, path: str, generation: int | None = None) -> Upstream | None:
        assert self.agent_address is not None
        host, port = self.agent_address
        agent = server_path(self.id, "agent") + path
        return Upstream(host, port, agent, self.agent_token, self.id, generation)


@dataclass(eq=False)
class Node:
    """One Ray node that hosts servers, as the runtime sees it."""

    id: str
    ip: str
    capacity: int
    runtime_id: str
    """The runtime id its agent uses on the node's engine (labels, network, keeper)."""
    actor: Any = None
    proxy: tuple[str, int] | None = None
    servers: dict[str, Server] = field(default_factory=dict)
    starting: int = 0
    lost: str | None = None
    """Why the node was lost, once it was."""
    unreachable_since: float | None = None
    probe: asyncio.Task[None] | None = None

    @property
    def label(self) -> str:
        return f"{self.id[:12]} ({self.ip})"

    @property
    def free(self) -> int:
        return self.capacity - len(self.servers) - self.starting

    @property
    def url(self) -> str:
        assert self.proxy is not None
        return f"http://{self.proxy[0]}:{self.proxy[1]}"


class RayBackend(Backend):
    """Hardened containers on every node of a Ray cluster, one agent actor per node."""

    name = "ray"
    server_noun = "container"

    def __init__(
        self,
        runtime_id: str,
        http: httpx2.AsyncClient,
        *,
        address: str | None = None,
        limits: Limits | None = None,
        max_lifetime: float = 24 * 3600,
        capacity: int | None = None,
        lost_after: float = 10.0,
        init_options: dict[str, Any] | None = None,
    ) -> None:
        """`address`: the cluster (``"auto"``, ``"<head>:6379"``); None connects to one this process already
        joined, or starts a local Ray. `capacity` overrides every node's server capacity. `lost_after`:
        seconds an agent may fail to answer before its node is declared lost. `init_options` go to
        ``ray.init``."""
        if importlib.util.find_spec("ray") is None:
            raise BadRequest(
                "the Ray backend needs Ray, which is not installed",
                "install the extra: pip install 'envreg[ray]'",
            )
        self.runtime_id = runtime_id
        self.http = http
        self.address = address
        self.limits = limits or Limits()
        self.max_lifetime = max_lifetime
        self.capacity = capacity
        self.lost_after = lost_after
        self.init_options = dict(init_options or {})
        self.secret = secrets.token_urlsafe(32)
        self.nodes: dict[str, Node] = {}
        self._eligible: dict[str, set[str]] = {}
        self._owns_ray = False
        self._ready_lock = anyio.Lock()
        self._started = False
        self._closing = False
        self._on_death: Any = None
        self._watchers: list[asyncio.Task[None]] = []

    # the cluster ------------------------------------------------------------------------------
    async def _ready(self) -> None:
        async with self._ready_lock:
            if self._started:
                return
            await anyio.to_thread.run_sync(self._connect)
            hosts = await anyio.to_thread.run_sync(self._hosting_nodes)
            async with anyio.create_task_group() as tg:
                for node in hosts:
                    tg.start_soon(self._start_agent, node)
            usable = [n for n in hosts if n.lost is None]
            if not usable:
                reasons = "; ".join(f"{n.label}: {n.lost}" for n in hosts) or "the cluster has no alive node"
                raise EngineError(f"no Ray node could host sandboxes ({reasons})")
            self.nodes = {n.id: n for n in usable}
            for node in usable:
                self._watchers.append(asyncio.ensure_future(self._watch(node)))
            self._started = True

    def _connect(self) -> None:
        import ray

        if ray.is_initialized():
            return
        options = {"log_to_driver": False, "logging_level": logging.WARNING, **self.init_options}
        self._check_reachable()
        try:
            ray.init(address=self.address, **options)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise EngineError(
                f"could not connect to the Ray cluster at {self.address or 'a local Ray'}: {exc}",
                "start one (`ray start --head`) or pass its address: Runtime(backend='ray', address='HOST:6379')",
            ) from None
        self._owns_ray = True

    def _check_reachable(self) -> None:
        """Refuse a ``HOST:PORT`` address nothing answers at, at once (``ray.init`` would retry for minutes)."""
        host, sep, port = (self.address or "").rpartition(":")
        if not sep or not port.isdigit() or "://" in self.address:  # pyright: ignore[reportOperatorIssue]
            return
        try:
            socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT).close()
        except OSError as exc:
            raise EngineError(
                f"no Ray cluster answers at {self.address}: {exc}",
                "check the head's address and port (`ray status` on the head prints it)",
            ) from None

    def _hosting_nodes(self) -> list[Node]:
        """The alive nodes that host servers: those with an `envreg_servers` resource, else every one."""
        import ray

        alive = [n for n in ray.nodes() if n.get("Alive")]
        declared = [n for n in alive if n.get("Resources", {}).get(NODE_RESOURCE)]
        memory = _bytes(self.limits.memory)
        nodes = []
        for info in declared or alive:
            resources = info.get("Resources", {})
            capacity = self.capacity or int(
                resources.get(NODE_RESOURCE) or resources.get("memory", 0) // memory
            )
            nodes.append(
                Node(
                    id=info["NodeID"],
                    ip=info.get("NodeManagerAddress", "?"),
                    capacity=max(capacity, 1),
                    runtime_id="rt_" + secrets.token_hex(6),
                )
            )
        return sorted(nodes, key=lambda n: n.id)

    async def _start_agent(self, node: Node) -> None:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        agent = ray.remote(NodeAgent).options(
            name=f"envreg-{self.runtime_id}-{node.id[:12]}",
            num_cpus=0,
            max_restarts=0,
            max_concurrency=1000,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node.id, soft=False),
        )
        node.actor = agent.remote(node.runtime_id, self.secret, self.limits, self.max_lifetime)
        try:
            with anyio.fail_after(SETUP_TIMEOUT):
                reply = await node.actor.setup.remote()
        except Exception as exc:  # a node whose agent cannot start hosts nothing; the others go on
            node.lost = f"its agent did not start: {_short(exc)}"
            logger.warning("Ray node %s cannot host sandboxes: %s", node.label, node.lost)
            with contextlib.suppress(Exception):
                ray.kill(node.actor)
            return
        if "error" in reply:
            node.lost = f"its agent did not start: {decode_error(reply['error'], node.label)}"
            logger.warning("Ray node %s cannot host sandboxes: %s", node.label, node.lost)
            ray.kill(node.actor)
            return
        node.proxy = (reply["ok"]["host"], reply["ok"]["port"])

    async def _call(self, node: Node, method: str, *args: Any) -> Any:
        """Call an agent; its envreg errors are raised as they were, naming the node."""
        from ray.exceptions import RayActorError

        if node.lost is not None:
            raise EngineError(f"Ray node {node.label} was lost: {node.lost}")
        try:
            reply = await getattr(node.actor, method).remote(*args)
        except RayActorError as exc:
            await self._suspect(node, exc)
            raise EngineError(f"Ray node {node.label} did not answer: {_short(exc)}") from None
        except Exception as exc:  # a failure inside the agent that is not an envreg error
            raise EngineError(f"on Ray node {node.label}: {method} failed: {_short(exc)}") from None
        node.unreachable_since = None
        if "error" in reply:
            raise decode_error(reply["error"], f"on Ray node {node.label}")
        return reply["ok"]

    # node loss --------------------------------------------------------------------------------
    async def _suspect(self, node: Node, exc: BaseException) -> None:
        """An agent call failed: a dead agent loses its node now; one that does not answer, after `lost_after`."""
        from ray.exceptions import ActorDiedError

        if node.lost is not None:
            return
        if isinstance(exc, ActorDiedError):
            self._lose(node, f"its agent died ({_short(exc)})")
            return
        if node.probe is None or node.probe.done():
            node.probe = asyncio.ensure_future(self._probe(node, exc))
        await asyncio.shield(node.probe)

    async def _probe(self, node: Node, first: BaseException) -> None:
        """Ping the agent until it answers, or until it has not for `lost_after` seconds."""
        from ray.exceptions import ActorDiedError

        started = node.unreachable_since = node.unreachable_since or time.monotonic()
        while time.monotonic() - started < self.lost_after:
            try:
                with anyio.fail_after(max(self.lost_after - (time.monotonic() - started), 0.1)):
                    await node.actor.ping.remote()
                node.unreachable_since = None
                return
            except ActorDiedError as exc:
                self._lose(node, f"its agent died ({_short(exc)})")
                return
            except Exception:
                await anyio.sleep(PROBE_INTERVAL)
        self._lose(node, f"its agent has not answered for {self.lost_after:g}s ({_short(first)})")

    def _lose(self, node: Node, why: str) -> None:
        """Mark a node lost: report its servers dead, place nothing there again."""
        import ray

        if node.lost is not None:
            return
        node.lost = why
        logger.warning("Ray node %s was lost: %s", node.label, why)
        servers, node.servers = list(node.servers), {}
        for server_id in servers:
            self._report(server_id, f"its node {node.label} was lost: {why}")
        with contextlib.suppress(Exception):
            ray.kill(node.actor, no_restart=True)  # if it still runs, its keeper exits with it

    def _report(self, server_id: str, reason: str) -> None:
        if self._on_death is not None and not self._closing:
            self._on_death(server_id, reason)

    async def _watch(self, node: Node) -> None:
        """Relay the deaths of a node's containers; a failing agent is suspected of node loss."""
        from ray.exceptions import RayActorError

        while node.lost is None and not self._closing:
            try:
                reply = await node.actor.events.remote()
            except RayActorError as exc:
                await self._suspect(node, exc)
                continue
            except Exception as exc:
                logger.warning("watching Ray node %s: %s", node.label, _short(exc))
                await anyio.sleep(1.0)
                continue
            if "error" in reply:
                logger.warning(
                    "watching Ray node %s: %s", node.label, decode_error(reply["error"], node.label)
                )
                await anyio.sleep(1.0)
                continue
            for server_id, status in reply["ok"]:
                if node.servers.pop(server_id, None) is not None:
                    self._report(server_id, f"its container on Ray node {node.label} died: {status}")

    def watch(self, on_death: Any) -> None:
        """Call `on_death(server_id, reason)` when a container dies or its node is lost."""
        self._on_death = on_death

    # resolve ----------------------------------------------------------------------------------
    async def resolve(self, ref: Any) -> EnvSpec:
        """Resolve on every node; the image most nodes resolve it to wins, and only they get its servers.

        Nodes must hold the same image (its ID is a content digest): load it on each (`envreg load`) or pull
        it from a registry by digest (`envreg pull --locked`)."""
        name = check_reference(getattr(ref, "name", ref))
        await self._ready()
        nodes = self._alive()
        answers: dict[str, Any] = {}

        async def ask(node: Node) -> None:
            try:
                answers[node.id] = tuple(await self._call(node, "resolve", name))
            except EnvregError as exc:
                answers[node.id] = exc

        async with anyio.create_task_group() as tg:
            for node in nodes:
                tg.start_soon(ask, node)
        found = [answers[n.id] for n in nodes if isinstance(answers.get(n.id), tuple)]
        if not found:
            raise next(
                (a for a in answers.values() if isinstance(a, EnvregError)), EngineError("no node answered")
            )
        (key, env_name, digest), _ = Counter(found).most_common(1)[0]
        self._eligible[key] = {n.id for n in nodes if answers.get(n.id) == (key, env_name, digest)}
        missing = [n.label for n in nodes if n.id not in self._eligible[key]]
        if missing:
            logger.warning(
                "%s (%s) is not on Ray node(s) %s: no sandboxes there", name, key[:19], ", ".join(missing)
            )
        return EnvSpec(key=key, name=env_name, digest=digest)

    # servers ----------------------------------------------------------------------------------
    def _alive(self) -> list[Node]:
        return [n for n in self.nodes.values() if n.lost is None]

    def _choose(self, spec: EnvSpec) -> Node:
        """The node with the most free capacity among those that hold the image."""
        eligible = self._eligible.get(spec.key)
        nodes = [n for n in self._alive() if eligible is None or n.id in eligible]
        best = max(nodes, key=lambda n: (n.free, -len(n.servers)), default=None)
        if best is None or best.free <= 0:
            held = sum(len(n.servers) + n.starting for n in nodes)
            total = sum(n.capacity for n in nodes)
            raise LimitReached(
                f"every Ray node that holds {spec.name} is full ({held} of {total} servers on {len(nodes)} node(s))",
                f"release sandboxes, add nodes, or raise their `{NODE_RESOURCE}` resource",
            )
        return best

    async def start(self, spec: EnvSpec, *, dedicated: bool) -> Server:
        await self._ready()
        node = self._choose(spec)
        node.starting += 1
        try:
            server_id = await self._call(node, "start_server", spec.key, spec.name, spec.digest, dedicated)
        finally:
            node.starting -= 1
        client = EnvClient(
            self.http,
            node.url + server_path(server_id, "agent"),
            node.url + server_path(server_id, "control"),
            self.secret,
            self.secret,
        )
        server = RayServer(
            id=server_id,
            spec=spec,
            client=client,
            dedicated=dedicated,
            agent_address=node.proxy,
            agent_token=self.secret,
            handle=node,
        )
        if node.lost is not None:  # lost while this server started
            raise EngineError(f"Ray node {node.label} was lost while starting {spec.name}: {node.lost}")
        node.servers[server_id] = server
        return server

    def node_of(self, server: Server) -> Node:
        """The node a server runs on."""
        return server.handle

    async def stop(self, server: Server) -> None:
        node: Node = server.handle
        node.servers.pop(server.id, None)
        if node.lost is not None:
            return  # nothing to reach: its engine's keeper and gc free it
        try:
            await self._call(node, "stop_server", server.id)
        except EngineError:
            if node.lost is None:
                raise

    async def status(self, server: Server) -> str:
        node: Node = server.handle
        problem = ""
        for _ in range(2):  # once more after an agent that failed a call answered its probe
            if node.lost is not None:
                break
            try:
                return await self._call(node, "status", server.id)
            except EngineError as exc:
                problem = exc.message
        if node.lost is None:
            return f"unknown ({problem})"
        return f"gone with Ray node {node.label}, which was lost: {node.lost}"

    # shutdown ---------------------------------------------------------------------------------
    async def close(self) -> None:
        """Remove every container, keeper and network on every node; stop the agents."""
        if not self._started:
            await anyio.to_thread.run_sync(self._disconnect)
            return
        self._closing = True
        for task in self._watchers:
            task.cancel()
        alive, lost = self._alive(), [n for n in self.nodes.values() if n.lost is not None]

        async def close_agent(node: Node) -> None:
            with contextlib.suppress(Exception), anyio.fail_after(CLOSE_TIMEOUT):
                await node.actor.close.remote()

        async with anyio.create_task_group() as tg:
            for node in alive:
                tg.start_soon(close_agent, node)
        if (
            lost
        ):  # where an engine is shared with a lost agent (one machine), clean up after it; one at a time
            for node in alive:
                with contextlib.suppress(Exception), anyio.fail_after(CLOSE_TIMEOUT):
                    await node.actor.sweep.remote([n.runtime_id for n in lost])
        import ray

        for node in self.nodes.values():
            with contextlib.suppress(Exception):
                ray.kill(node.actor, no_restart=True)
        self.nodes = {}
        self._started = False
        await anyio.to_thread.run_sync(self._disconnect)

    def _disconnect(self) -> None:
        if self._owns_ray:
            import ray

            ray.shutdown()
            self._owns_ray = False


def _bytes(size: str) -> int:
    """Docker's memory notation (``256m``, ``1g``) in bytes."""
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    size = size.strip().lower()
    return int(float(size[:-1]) * units[size[-1]]) if size[-1] in units else int(size)


def _short(exc: BaseException) -> str:
    """The first line of an error, without Ray's long explanations."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:300]}" if text else type(exc).__name__
