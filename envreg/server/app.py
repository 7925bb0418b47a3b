"""Assemble and run the environment server: two uvicorn servers (agent, control) in one event loop."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

import anyio

from envreg.env import Environment, load_environment
from envreg.protocol import AGENT_PORT, CONTROL_PORT
from envreg.server.agent import AgentPlane
from envreg.server.control import control_app
from envreg.server.instances import InstanceStore

LOOPBACK = ("127.0.0.1", "localhost", "::1")
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
    fast_path: bool = True
    preload_sdk: bool = False
    agent_token: str | None = None


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

    @classmethod
    def build(cls, config: ServerConfig, env: Environment | None = None) -> EnvServer:
        env = env or load_environment(config.env)
        store = InstanceStore(env, config.max_instances)
        loopback = config.host in LOOPBACK
        agent_body, control_body = body_limits(env, config.max_body)
        agent = AgentPlane(
            store,
            max_body=agent_body,
            loopback=loopback,
            fast_path=config.fast_path,
            preload_sdk=config.preload_sdk,
            token=config.agent_token,
        )
        control = control_app(store, config.token, control_body, load_manifest(env))
        return cls(store, agent, control)


async def serve_async(
    config: ServerConfig, ready: anyio.Event | None = None, env: Environment | None = None
) -> None:
    import uvicorn

    server = EnvServer.build(config, env)
    # keep-alive outlasts the gateway's pooled connections (envreg.runtime.upstream.IDLE_SECONDS)
    common: dict[str, Any] = {
        "host": config.host,
        "log_level": "warning",
        "access_log": False,
        "timeout_keep_alive": 75,
    }
    agent = uvicorn.Server(uvicorn.Config(server.agent, port=config.port, lifespan="on", **common))
    control = uvicorn.Server(
        uvicorn.Config(server.control, port=config.control_port, lifespan="off", **common)
    )
    servers = (agent, control)

    async def run(s: uvicorn.Server) -> None:
        try:
            await s.serve()
        finally:
            for other in servers:
                other.should_exit = True

    async with anyio.create_task_group() as tg:
        for s in servers:
            tg.start_soon(run, s)
        if ready is not None:
            while not all(s.started for s in servers):
                await anyio.sleep(0.01)
            ready.set()


def serve(config: ServerConfig) -> None:
    """Run until SIGINT / SIGTERM."""
    try:
        import uvloop

        backend_options = {"use_uvloop": True}
        del uvloop
    except ImportError:
        backend_options = {}
    if config.host not in LOOPBACK:
        logger.warning("serving on %s: reachable beyond this machine's loopback", config.host)
    anyio.run(serve_async, config, backend="asyncio", backend_options=backend_options)


__all__ = ["EnvServer", "ServerConfig", "serve", "serve_async"]
