"""`envreg serve`: the runtime daemon (REST control API + MCP gateway on one port) and its discovery file."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import signal
import socket
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx2
import uvicorn

from envreg.config import envreg_home
from envreg.http.asgi import KeepAlive
from envreg.http.client import async_client
from envreg.http.fastpath import verified
from envreg.http.serving import QuietServer
from envreg.protocol import KEEP_ALIVE_GRACE, KEEP_ALIVE_SECONDS
from envreg.runtime.fastlane import Lane
from envreg.server.listen import listen

logger = logging.getLogger("envreg.daemon")
DEFAULT_PORT = 7070


def daemon_file() -> Path:
    """``$ENVREG_HOME/daemon.json``: ``{url, token, pid}`` of the running daemon (mode 0600)."""
    return envreg_home() / "daemon.json"


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def read_daemon_file() -> dict[str, Any] | None:
    """The daemon record, or None when there is none or it names a dead process."""
    path = daemon_file()
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or not {"url", "token", "pid"} <= record.keys():
        return None
    return record if isinstance(record["pid"], int) and pid_alive(record["pid"]) else None


def write_daemon_file(url: str, token: str) -> Path:
    path = daemon_file()
    tmp = path.with_name(f".daemon.json.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump({"url": url, "token": token, "pid": os.getpid()}, f)
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)
    return path


def remove_daemon_file() -> None:
    """Remove daemon.json if it is this process's."""
    path = daemon_file()
    with contextlib.suppress(OSError, ValueError):
        if json.loads(path.read_text()).get("pid") == os.getpid():
            path.unlink()


@dataclass
class DaemonConfig:
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    token: str | None = None
    pool: dict[str, int] = field(default_factory=dict)
    recycle: int = 0
    lease_ttl: float = 3600.0
    max_sandboxes: int = 1024
    tiers: tuple[str, ...] = ("instance", "container")
    public_url: str | None = None
    allowed_hosts: tuple[str, ...] = ()
    cors_origins: tuple[str, ...] = ()
    keep_alive: int = KEEP_ALIVE_SECONDS
    """Seconds an idle connection is kept, as answers say (`KeepAlive`); closed `KEEP_ALIVE_GRACE` later."""
    ui_data: tuple[Path, ...] = ()
    """Folders the web console (``/ui``) reads trajectories, rollouts and validation reports from."""
    write_file: bool = True
    log_level: str = "warning"


def public_url(host: str, port: int, explicit: str | None) -> str:
    if explicit:
        return explicit.rstrip("/")
    if host in ("0.0.0.0", "::", ""):
        host = socket.gethostname()
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


async def run_daemon(config: DaemonConfig, *, ready: Any = None) -> None:
    """Serve until SIGINT / SIGTERM, then release every sandbox and remove daemon.json.

    `ready(url, token)` is called once the port is bound and the runtime is up.
    """
    from envreg.daemon.app import DaemonSettings, create_app
    from envreg.runtime import Runtime

    token = config.token or secrets.token_urlsafe(32)
    sock = listen(config.host, config.port)
    sock.setblocking(False)
    port = sock.getsockname()[1]
    url = public_url(config.host, port, config.public_url)
    settings = DaemonSettings(
        token=token,
        max_sandboxes=config.max_sandboxes,
        tiers=config.tiers,
        default_ttl=config.lease_ttl,
        allowed_hosts=(*config.allowed_hosts, urlsplit(url).netloc),  # the URL it gives agents
        cors_origins=config.cors_origins,
        ui_data=config.ui_data,
    )
    try:
        async with (
            Runtime(
                gateway=False, pool=config.pool, recycle=config.recycle, lease_ttl=config.lease_ttl
            ) as rt,
            async_client(
                timeout=httpx2.Timeout(30.0, connect=2.0, read=None),
                limits=httpx2.Limits(max_connections=1000),
            ) as http,
        ):
            rt.gateway_url = url  # sandboxes' mcp_url: this port serves the gateway too
            app = create_app(rt, settings, http)
            # the gateway's fast lane, as on the runtime's own gateway: a plain tool call skips ASGI, the rest
            # goes to `app`; /v1/healthz counts what it relayed
            lane = None
            if verified("daemon's gateway"):
                lane = Lane(rt.get, app.gateway.max_body, app.gateway.timeout, config.keep_alive)
                app.api.state.daemon.fast_path = lane
            server = QuietServer(
                uvicorn.Config(
                    KeepAlive(app, config.keep_alive),
                    lifespan="off",
                    log_level=config.log_level,
                    access_log=False,
                    timeout_keep_alive=config.keep_alive + KEEP_ALIVE_GRACE,
                    timeout_graceful_shutdown=5,
                    **({"http": lane.protocol()} if lane is not None else {}),
                )
            )
            async with anyio.create_task_group() as tg:

                async def watch_signals() -> None:
                    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                        async for _ in signals:
                            app.gateway.end_streams()  # open event streams would hold the shutdown
                            server.should_exit = True
                            return

                async def run_server() -> None:
                    await server.serve([sock])
                    tg.cancel_scope.cancel()  # stopped (signal) or failed: end the daemon

                tg.start_soon(watch_signals)
                tg.start_soon(run_server)
                while not server.started:
                    await anyio.sleep(0.01)
                if config.write_file:
                    write_daemon_file(url, token)
                if ready is not None:
                    ready(url, token)
            await app.gateway.aclose()
            if lane is not None:
                lane.close()
    finally:
        if config.write_file:
            remove_daemon_file()
        sock.close()


def serve(config: DaemonConfig, *, ready: Any = None) -> None:
    """Blocking `run_daemon` (uvloop when available)."""
    try:
        import uvloop  # noqa: F401

        backend_options = {"use_uvloop": True}
    except ImportError:  # pragma: no cover
        backend_options = {}
    try:
        anyio.run(lambda: run_daemon(config, ready=ready), backend_options=backend_options)
    except KeyboardInterrupt:  # pragma: no cover
        sys.exit(130)
