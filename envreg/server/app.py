"""Assemble and run the environment server: two uvicorn servers (agent, control) in one event loop."""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import anyio

from envreg.env import Environment, load_environment
from envreg.http.asgi import KeepAlive
from envreg.http.loopback import is_loopback
from envreg.http.serving import QuietServer, SignalStop
from envreg.protocol import (
    AGENT_PORT,
    CONTROL_PORT,
    KEEP_ALIVE_GRACE,
    KEEP_ALIVE_SECONDS,
    SESSION_IDLE_TIMEOUT,
)
from envreg.server.agent import AgentPlane
from envreg.server.control import control_app
from envreg.server.instances import InstanceStore, state_budget
from envreg.server.listen import listen_all
from envreg.server.recycle import Lease, LeaseGuard, end_for_recycle
from envreg.server.sessions import SessionLimits, memory_limit

AGENT_BODY = 4 * 1024 * 1024
logger = logging.getLogger("envreg.server")


@dataclass
class ServerConfig:
    env: str
    token: str
    host: str = "127.0.0.1"
    port: int = AGENT_PORT
    control_port: int = CONTROL_PORT
    max_instances: int = 4096
    max_body: int | None = None  # None: from the environment's limits (`body_limits`)
    snapshot_budget: int = 32 * 1024 * 1024
    state_budget: int | None = None
    """Bytes of compact JSON all instances' states may hold together (None: `state_budget` of the memory limit)."""
    fast_path: bool = True
    preload_sdk: bool = False
    agent_token: str | None = None
    agent_socket: str | None = None
    """Also serve the agent plane on a Unix socket at this path (`listen_unix`): the gateway's shorter way
    to a sandbox container (a folder the host shares with it), beside the port."""
    recyclable: bool = False
    """`POST /recycle` ends the process asking for a fresh one (under `envreg.server.recycle`)."""
    generation: int = 0
    """Which process of a recyclable server this is (0, 1, ...): `/healthz` says it."""
    max_sessions: int | None = None
    """Open 2025-11-25 sessions kept at once (None: sized to the memory limit, `SessionLimits.for_memory`)."""
    max_sessions_per_instance: int | None = None
    session_idle_timeout: float = SESSION_IDLE_TIMEOUT
    """Seconds a session without a request in flight (or an open event stream) is kept."""

    def session_limits(self) -> SessionLimits:
        return SessionLimits.detect(
            idle_timeout=self.session_idle_timeout,
            max_sessions=self.max_sessions,
            max_per_instance=self.max_sessions_per_instance,
        )


def body_limits(env: Environment, max_body: int | None) -> tuple[int, int]:
    """(agent plane, control plane) request body limits: `max_body` for both when given, else 4 MiB (at
    least twice the environment's argument limit) for MCP requests, so that a call with oversized arguments
    gets an error result naming that limit, and room for a state at twice its size limit on the control
    plane, so that an oversized state is refused naming the state limit."""
    if max_body is not None:
        return max_body, max_body
    limits = env.limits
    return (
        max(AGENT_BODY, 2 * limits.max_argument_bytes + 64 * 1024),
        2 * limits.max_state_bytes + 1024 * 1024,
    )


def load_manifest(env: Environment) -> dict[str, Any]:
    """The image's manifest file when there is one, else one generated from the code."""
    if env.folder is not None and (env.folder / "manifest.json").is_file():
        return json.loads((env.folder / "manifest.json").read_text())
    from envreg.manifest import build_manifest

    return build_manifest(env).to_json()


@dataclass
class EnvServer:
    """The two ASGI apps sharing one instance store."""

    store: InstanceStore
    agent: AgentPlane
    control: Any
    lease: Lease | None = None
    """A recyclable server's lease (`envreg.server.recycle`): both planes refuse what it refuses."""

    def planes(self) -> tuple[Any, Any]:
        """The agent and control apps to serve, behind the lease's guard when there is one."""
        if self.lease is None:
            return self.agent, self.control
        return LeaseGuard(self.agent, self.lease, mcp=True), LeaseGuard(self.control, self.lease, mcp=False)

    @classmethod
    def build(cls, config: ServerConfig, env: Environment | None = None) -> EnvServer:
        env = env or load_environment(config.env)
        store = InstanceStore(
            env,
            config.max_instances,
            snapshot_budget=config.snapshot_budget,
            state_budget=config.state_budget
            if config.state_budget is not None
            else state_budget(memory_limit()),
        )
        loopback = is_loopback(config.host)
        agent_body, control_body = body_limits(env, config.max_body)
        agent = AgentPlane(
            store,
            max_body=agent_body,
            loopback=loopback,
            fast_path=config.fast_path,
            preload_sdk=config.preload_sdk,
            token=config.agent_token,
            sessions=config.session_limits(),
        )
        lease = Lease(config.generation) if config.recyclable else None
        recycle = (lambda: end_for_recycle(lease)) if lease is not None else None
        control = control_app(
            store,
            config.token,
            control_body,
            load_manifest(env),
            recycle,
            config.generation,
            sessions=agent.sdk.session_stats,
        )
        return cls(store, agent, control, lease)


async def serve_async(
    config: ServerConfig,
    sockets: Sequence[socket.socket],
    ready: anyio.Event | None = None,
    env: Environment | None = None,
    stop: SignalStop | None = None,
) -> None:
    """Serve both planes on `sockets` (agent then control, listening; any after those serve the agent plane
    too: its Unix socket) until cancelled, or until `stop` catches a signal (both planes then stop at once).
    Embedded (no `stop`), it leaves signals to its host."""
    import uvicorn

    from envreg.http.fastpath import verified
    from envreg.server.agent_lane import AgentLane

    server = EnvServer.build(config, env)
    # keep-alive outlasts the gateway's pooled connections (envreg.protocol.UPSTREAM_IDLE_SECONDS)
    common: dict[str, Any] = {
        "host": config.host,
        "log_level": "warning",
        "log_config": None,  # no dictConfig at start: warnings go to stderr through the last-resort handler
        "access_log": False,
        "timeout_keep_alive": KEEP_ALIVE_SECONDS + KEEP_ALIVE_GRACE,
        "ws": "none",
        "proxy_headers": False,
        "lifespan": "off",  # the one background task (the mcp SDK, on demand) runs in the task group below
    }
    agent_plane, control_plane = server.planes()
    lane = {}
    if server.agent.lean is not None and verified("environment server"):
        lane = {"http": AgentLane(server.agent, KEEP_ALIVE_SECONDS, server.lease).protocol()}
    agent = QuietServer(
        uvicorn.Config(KeepAlive(agent_plane, KEEP_ALIVE_SECONDS), port=config.port, **common, **lane)
    )
    control = QuietServer(
        uvicorn.Config(KeepAlive(control_plane, KEEP_ALIVE_SECONDS), port=config.control_port, **common)
    )
    servers = (agent, control)
    if stop is not None:
        for s in servers:
            stop.add(s)

    async def run(s: uvicorn.Server, listening: list[socket.socket]) -> None:
        try:
            await s.serve(listening)
        finally:
            for other in servers:
                other.should_exit = True

    sdk = anyio.CancelScope()

    async def run_sdk() -> None:
        with sdk:
            await server.agent.sdk.run()

    async with anyio.create_task_group() as tg:
        tg.start_soon(run_sdk)
        async with anyio.create_task_group() as planes:
            planes.start_soon(run, agent, [sockets[0], *sockets[2:]])
            planes.start_soon(run, control, [sockets[1]])
            if ready is not None:
                while not all(s.started for s in servers):
                    await anyio.sleep(0.002)
                ready.set()
        sdk.cancel()


def serve(
    config: ServerConfig,
    env: Environment | None = None,
    on_ready: Callable[[], None] | None = None,
    sockets: Sequence[socket.socket] | None = None,
) -> None:
    """Run until SIGINT / SIGTERM; `on_ready` is called once both planes listen. Binds the config's ports
    first unless `sockets` are given: `CannotListen` when one is taken."""
    try:
        import uvloop

        backend_options = {"use_uvloop": True}
        del uvloop
    except ImportError:
        backend_options = {}
    if not is_loopback(config.host):
        logger.warning("serving on %s: reachable beyond this machine's loopback", config.host)

    sockets = sockets or listen_all(config.host, (config.port, config.control_port), config.agent_socket)

    async def main(stop: SignalStop) -> None:
        ready = anyio.Event()
        async with anyio.create_task_group() as tg:
            tg.start_soon(serve_async, config, sockets, ready, env, stop)
            await ready.wait()
            if on_ready is not None:
                on_ready()

    with SignalStop() as stop:
        anyio.run(main, stop, backend="asyncio", backend_options=backend_options)


__all__ = ["EnvServer", "ServerConfig", "serve", "serve_async"]
