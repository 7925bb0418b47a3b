"""The environment server in this process, on 127.0.0.1, with one instance: an MCP URL and its token.

What `envreg run --isolation local` and `envreg episode --isolation local` serve: the same server an image
runs (both planes, tokens on both), without the container, so it needs no Docker. The environment's code
runs unsandboxed in this process: for environments you trust (the catalog's, your own).
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio

from envreg.env import Environment
from envreg.http.client import async_client
from envreg.protocol import agent_path
from envreg.runtime.client import EnvClient
from envreg.server.listen import listen


@dataclass
class LocalSandbox:
    """One instance on an in-process environment server (the fields `envreg run` prints)."""

    id: str
    env: str
    env_digest: str
    mcp_url: str
    token: str
    client: EnvClient
    isolation: str = "local"
    expires_at: float | None = None

    async def state(self) -> dict[str, Any]:
        return await self.client.get_state(self.id)


@asynccontextmanager
async def local_sandbox(
    env: Environment, state: dict[str, Any] | None = None, port: int = 0
) -> AsyncIterator[LocalSandbox]:
    """Serve `env` on 127.0.0.1 (the agent plane on `port`, 0 for any) with one instance from `state` (else
    the seed); stops when the block ends. Raises `InvalidState` for a state the environment refuses."""
    from envreg.runtime.backends.local import environment_digest
    from envreg.server.app import ServerConfig, serve_async

    sockets = [listen("127.0.0.1", port), listen("127.0.0.1", 0)]
    agent_port, control_port = (s.getsockname()[1] for s in sockets)
    agent_token, control_token = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
    config = ServerConfig(
        env=str(env.folder or env.name),
        token=control_token,
        port=agent_port,
        control_port=control_port,
        agent_token=agent_token,
    )
    ready = anyio.Event()
    async with anyio.create_task_group() as tg, async_client(timeout=60) as http:
        tg.start_soon(serve_async, config, sockets, ready, env)
        await ready.wait()
        agent_url, control_url = f"http://127.0.0.1:{agent_port}", f"http://127.0.0.1:{control_port}"
        client = EnvClient(http, agent_url, control_url, control_token, agent_token)
        try:
            instance_id = await client.create_instance(state)
            yield LocalSandbox(
                id=instance_id,
                env=env.name,
                env_digest=environment_digest(env),
                mcp_url=agent_url + agent_path(instance_id),
                token=agent_token,
                client=client,
            )
        finally:
            tg.cancel_scope.cancel()
