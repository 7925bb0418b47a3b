"""`python -m envreg.server ENV ...`: the environment server's own entry point, the one images run.

The same options as `envreg serve-env`, parsed with argparse: starting the server imports the
server and the environment, not the CLI (typer, click, rich) nor the runtime (Docker, HTTP clients).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from dataclasses import replace

from envreg.config import startup_trace
from envreg.protocol import (
    AGENT_PORT,
    CONTROL_PORT,
    ENV_AGENT_SOCKET,
    ENV_AGENT_TOKEN,
    ENV_RECYCLE,
    ENV_TOKEN,
    SESSION_IDLE_TIMEOUT,
)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m envreg.server",
        description="Serve an environment over MCP streamable HTTP, with a token-protected control plane.",
    )
    p.add_argument("env", help="Environment folder or name under ./images.")
    p.add_argument("--port", type=int, default=AGENT_PORT, help="Agent plane (MCP) port.")
    p.add_argument("--control-port", type=int, default=CONTROL_PORT, help="Control plane port.")
    p.add_argument("--token", help=f"Control plane bearer token (default: ${ENV_TOKEN}).")
    p.add_argument(
        "--host", default="127.0.0.1", help="Bind address. Anything but loopback must be asked for."
    )
    p.add_argument("--max-instances", type=int, default=4096, help="Most instances held at once.")
    p.add_argument(
        "--max-body",
        type=int,
        default=None,
        help="Largest request body in bytes, on both planes (default: from the environment's limits).",
    )
    p.add_argument(
        "--snapshot-cache-mb", type=int, default=32, help="Snapshots kept beyond live instances, in MB."
    )
    p.add_argument(
        "--no-fast-path", dest="fast_path", action="store_false", help="Serve every request with the mcp SDK."
    )
    p.add_argument("--preload-sdk", action="store_true", help="Import the mcp SDK at start.")
    p.add_argument(
        "--agent-token", help=f"Bearer token required on the agent plane (default: ${ENV_AGENT_TOKEN})."
    )
    p.add_argument(
        "--agent-socket",
        help=f"Also serve the agent plane on a Unix socket at this path (default: ${ENV_AGENT_SOCKET}).",
    )
    p.add_argument(
        "--max-sessions",
        type=int,
        default=None,
        help="Open 2025-11-25 sessions kept at once (default: sized to the memory limit).",
    )
    p.add_argument(
        "--max-sessions-per-instance",
        type=int,
        default=None,
        help="Open sessions kept per instance (default: an eighth of --max-sessions).",
    )
    p.add_argument(
        "--session-idle-timeout",
        type=float,
        default=SESSION_IDLE_TIMEOUT,
        help="Seconds a session with no request in flight and no open event stream is kept.",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    """Serve until stopped; a refused start prints error and hint (exit 2 for bad usage, 3 for a port
    that is taken, 1 otherwise)."""
    args = parser().parse_args(argv)
    token = args.token or os.environ.get(ENV_TOKEN)
    if not token:
        print(f"error: the control plane needs a token: pass --token or set {ENV_TOKEN}", file=sys.stderr)
        return 2
    from envreg.errors import BadRequest, EnvregError
    from envreg.server.listen import LISTEN_EXIT, CannotListen

    try:
        return _serve(args, token)
    except EnvregError as exc:
        print(f"error: {exc.message}" + (f"\nhint: {exc.hint}" if exc.hint else ""), file=sys.stderr)
        return 2 if isinstance(exc, BadRequest) else LISTEN_EXIT if isinstance(exc, CannotListen) else 1


def _serve(args: argparse.Namespace, token: str) -> int:
    trace = Startup() if startup_trace() else None
    from envreg.server.app import ServerConfig, serve

    if trace:
        trace.mark("imports")
    from envreg.env import load_environment

    env = load_environment(args.env)
    if trace:
        trace.mark("environment")
    config = ServerConfig(
        env=args.env,
        host=args.host,
        port=args.port,
        control_port=args.control_port,
        token=token,
        max_instances=args.max_instances,
        max_body=args.max_body,
        snapshot_budget=args.snapshot_cache_mb * 1024 * 1024,
        fast_path=args.fast_path,
        preload_sdk=args.preload_sdk,
        agent_token=args.agent_token or os.environ.get(ENV_AGENT_TOKEN) or None,
        agent_socket=args.agent_socket or os.environ.get(ENV_AGENT_SOCKET) or None,
        recyclable=os.environ.get(ENV_RECYCLE) == "1",
        max_sessions=args.max_sessions,
        max_sessions_per_instance=args.max_sessions_per_instance,
        session_idle_timeout=args.session_idle_timeout,
    )
    config.session_limits()  # bad limits are refused here, before anything starts
    on_ready = trace.report if trace else None
    if config.recyclable:
        from envreg.server.recycle import prepare, serve_recyclable

        prepare(env)
        return serve_recyclable(
            lambda sockets, generation: serve(replace(config, generation=generation), env, on_ready, sockets),
            args.host,
            (args.port, args.control_port),
            config.agent_socket,
        )
    serve(config, env, on_ready)
    return 0


class Startup:
    """Where a server's start goes (``ENVREG_STARTUP_TRACE=1``): one JSON line on stderr once it listens,
    milliseconds from the process's start (the kernel's record of it) to each step. In a container the
    first step also holds the runtime's setup of the process (namespaces, mounts) before Python runs."""

    def __init__(self) -> None:
        import time

        self.clock = lambda: time.clock_gettime(time.CLOCK_BOOTTIME)
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        self.start = int(fields[19]) / os.sysconf("SC_CLK_TCK")
        self.marks = {"python": self.clock()}

    def mark(self, step: str) -> None:
        self.marks[step] = self.clock()

    def report(self) -> None:
        import json

        self.mark("listening")
        steps, last = {}, self.start
        for step, at in self.marks.items():
            steps[f"{step}_ms"] = round((at - last) * 1000, 1)
            last = at
        steps["total_ms"] = round((last - self.start) * 1000, 1)
        steps["process_start"] = self.start  # CLOCK_BOOTTIME seconds: comparable with the host's clock
        print(json.dumps({"envreg_startup": steps}), file=sys.stderr, flush=True)


def _interrupted() -> None:
    """Ctrl-C stopped the server: end by SIGINT, as the shell expects, without a traceback."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.raise_signal(signal.SIGINT)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        _interrupted()
