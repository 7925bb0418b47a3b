"""Runtime commands: `envreg serve` (the daemon), `run`, `ps`, `logs`, `stop`, `gc`."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from envreg.cli.output import JsonOpt, QuietOpt, err, fail, print_json
from envreg.http.loopback import is_loopback
from envreg.protocol import DEFAULT_GRACE, KEEP_ALIVE_GRACE, KEEP_ALIVE_SECONDS, TIERS

FOREVER = 10 * 365 * 24 * 3600.0
SERVER_HINT = "pip install 'envreg[server]' (FastAPI, for the daemon's REST API)"


def _out() -> Console:
    # wide enough off a terminal that MCP URLs and ids are never cut
    return Console(emoji=False, highlight=False, width=None if sys.stdout.isatty() else 250)


def parse_pool(spec: str | None) -> dict[str, int]:
    """``container=2,instance=8`` -> {"container": 2, "instance": 8}."""
    pool: dict[str, int] = {}
    for part in filter(None, (p.strip() for p in (spec or "").split(","))):
        tier, sep, count = part.partition("=")
        if not sep or tier not in ("container", "instance") or not count.isdigit():
            raise fail(
                f"bad --pool {part!r}",
                "write TIER=N with TIER container or instance, e.g. --pool container=2,instance=8",
                2,
            )
        pool[tier] = int(count)
    return pool


def parse_tiers(spec: str) -> tuple[str, ...]:
    tiers = tuple(t.strip() for t in spec.split(",") if t.strip())
    bad = [t for t in tiers if t not in TIERS]
    if bad or not tiers:
        raise fail(f"bad --tiers {spec!r}", f"a comma-separated list of {', '.join(TIERS)}", 2)
    return tiers


def expires_in(expires_at: float | None) -> str:
    if expires_at is None:
        return "never"
    left = int(expires_at - time.time())
    if left <= 0:
        return "expired"
    if left >= 365 * 24 * 3600:
        return "never"
    days, rest = divmod(left, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, seconds = divmod(rest, 60)
    if days:
        return f"in {days}d {hours}h"
    if hours:
        return f"in {hours}h {minutes}m"
    return f"in {minutes}m {seconds}s" if minutes else f"in {seconds}s"


def _client() -> Any:
    from envreg.daemon.client import START_HINT, DaemonClient, DaemonNotRunning

    try:
        return DaemonClient.discover()
    except DaemonNotRunning as exc:
        raise fail(str(exc), START_HINT) from None


def _daemon_failed(exc: Exception) -> typer.Exit:
    """`fail` for a refused or unanswered daemon request (with the problems a 422 lists)."""
    from envreg.daemon.client import START_HINT, DaemonError

    if not isinstance(exc, DaemonError):
        return fail(str(exc), START_HINT)
    detail = "".join(f"\n  {'.'.join(map(str, e.get('loc', [])))}: {e.get('msg')}" for e in exc.errors[:10])
    hint = "see `envreg ps` for the sandboxes the daemon holds" if exc.status == 404 else None
    return fail(f"{exc}{detail}", hint)


# serve --------------------------------------------------------------------------------------------
AllowHost = Annotated[
    list[str] | None,
    typer.Option(
        help="Another Host this port answers to (name:port, or name:* for any port), e.g. behind a "
        "proxy; loopback at this port always works. Repeatable.",
        metavar="HOST",
        show_default=False,
    ),
]
CorsOrigin = Annotated[
    list[str] | None,
    typer.Option(
        help="A browser origin allowed to call this port (CORS), e.g. http://localhost:6274; * for any. "
        "None by default. Repeatable.",
        metavar="ORIGIN",
        show_default=False,
    ),
]


def serve(
    host: Annotated[
        str, typer.Option(help="Bind address. Anything but loopback exposes the API: use with care.")
    ] = "127.0.0.1",
    port: Annotated[
        int, typer.Option(help="Port of the control API and the MCP gateway (0: any free one).")
    ] = 7070,
    token: Annotated[
        str | None,
        typer.Option(
            help="Daemon token (default: $ENVREG_TOKEN, else a new one, written to $ENVREG_HOME/daemon.json).",
            show_default=False,
        ),
    ] = None,
    pool: Annotated[
        str | None,
        typer.Option(help="Warm pool sizes per tier, e.g. container=2,instance=8.", show_default=False),
    ] = None,
    recycle: Annotated[
        int,
        typer.Option(
            help="Containers kept per environment after their sandbox ends, each serving a later "
            "container sandbox from a fresh server process (0: removed)."
        ),
    ] = 0,
    lease_ttl: Annotated[float, typer.Option(help="Default sandbox lease, in seconds.")] = 3600.0,
    max_sandboxes: Annotated[int, typer.Option(help="Most sandboxes leased at once (429 past it).")] = 1024,
    tiers: Annotated[
        str, typer.Option(help="Isolation tiers the API may lease (local runs env code in the daemon).")
    ] = "instance,container",
    public_url: Annotated[
        str | None,
        typer.Option(
            help="Base URL agents use to reach this port (default: http://HOST:PORT).", show_default=False
        ),
    ] = None,
    allow_host: AllowHost = None,
    cors_origin: CorsOrigin = None,
    keep_alive: Annotated[
        int,
        typer.Option(
            help="Seconds an idle connection to this port is kept (answers say Keep-Alive: timeout=N; "
            f"it is closed {KEEP_ALIVE_GRACE} s later). Above any proxy's idle timeout in front of it."
        ),
    ] = KEEP_ALIVE_SECONDS,
    ui_data: Annotated[
        list[Path] | None,
        typer.Option(
            "--ui-data",
            help="A folder whose trajectories, rollout outputs and validation reports the web console (/ui) "
            "shows. Repeatable.",
            metavar="DIR",
            show_default=False,
        ),
    ] = None,
    log_level: Annotated[str, typer.Option(help="uvicorn log level.")] = "warning",
) -> None:
    """Run the runtime daemon: a REST control API (OpenAPI at /openapi.json) and the MCP gateway, on one port."""
    from envreg.config import daemon_token

    try:
        import fastapi  # noqa: F401
    except ModuleNotFoundError:
        raise fail("`envreg serve` needs FastAPI, which the server extra brings", SERVER_HINT) from None
    from envreg.daemon.serve import DaemonConfig, daemon_file, read_daemon_file
    from envreg.daemon.serve import serve as run
    from envreg.server.listen import LISTEN_EXIT, ONE_PORT_HINT, CannotListen

    running = read_daemon_file()
    if running is not None and running["pid"] != os.getpid():
        raise fail(
            f"a daemon already runs for {daemon_file().parent} at {running['url']} (pid {running['pid']})",
            f"stop it (kill {running['pid']}) or set ENVREG_HOME to run another",
        )
    if lease_ttl <= 0 or max_sandboxes < 1 or recycle < 0 or keep_alive < 1:
        raise fail(
            "bad --lease-ttl, --max-sandboxes, --keep-alive or --recycle",
            "--lease-ttl, --max-sandboxes and --keep-alive must be positive, --recycle at least 0",
            2,
        )
    for folder in ui_data or []:
        if not folder.is_dir():
            raise fail(f"--ui-data {folder}: not a folder", "give a folder of trajectories or reports", 2)
    token = token or daemon_token()
    config = DaemonConfig(
        host=host,
        port=port,
        token=token,
        pool=parse_pool(pool),
        recycle=recycle,
        lease_ttl=lease_ttl,
        max_sandboxes=max_sandboxes,
        tiers=parse_tiers(tiers),
        public_url=public_url,
        allowed_hosts=tuple(allow_host or ()),
        cors_origins=tuple(cors_origin or ()),
        keep_alive=keep_alive,
        ui_data=tuple(p.resolve() for p in ui_data or ()),
        log_level=log_level,
    )
    if not is_loopback(host):
        err.print(
            f"[yellow]warning:[/] listening on {host}: anyone who can reach it and holds the token controls "
            "sandboxes, and traffic is plain HTTP; put TLS in front of it off a trusted network"
        )

    def ready(url: str, daemon_token: str) -> None:
        where = "given token" if token else f"token in {daemon_file()}"
        err.print(f"envreg daemon listening on [bold]{url}[/] ({where}; API docs: {url}/openapi.json)")
        err.print(f"web console: {url}/ui/ (sign in with the daemon token)")
        err.print("Ctrl-C or SIGTERM stops it and removes every sandbox it leased")

    try:
        run(config, ready=ready)
    except CannotListen as exc:
        raise fail(exc.message, ONE_PORT_HINT, LISTEN_EXIT) from None


# run ----------------------------------------------------------------------------------------------
def _read_state(path: Path | None) -> dict[str, Any] | None:
    if path is None:
        return None
    hint = (
        "give a JSON file holding the environment's state (an object, as `envreg inspect NAME` describes it)"
    )
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise fail(f"cannot read --state {path}: {exc.strerror}", hint) from None
    except ValueError as exc:
        raise fail(f"--state {path} is not JSON: {exc}", hint) from None
    if not isinstance(data, dict):
        raise fail(f"--state {path} does not hold a JSON object", hint)
    return data


def _print_sandbox(info: dict[str, Any], as_json: bool, detached: bool) -> None:
    out = _out()
    if as_json:
        print(json.dumps(info), flush=True)
        return
    out.print(
        f"sandbox   {info['id']}  ({info['env']}, {info['isolation']}, expires {expires_in(info.get('expires_at'))})"
    )
    out.print(f"MCP URL   {info['mcp_url']}")
    out.print(f"token     {info['token']}")
    out.print(f"header    Authorization: Bearer {info['token']}")
    if detached:
        out.print(f"stop it with `envreg stop {info['id']}`")
    sys.stdout.flush()


def run_cmd(
    env: Annotated[
        str, typer.Argument(help="Environment: name, name:version, name@sha256:<id> or an image reference.")
    ],
    isolation: Annotated[
        str,
        typer.Option(
            help="container (its own container), instance (in a shared one) or local (the environment's code "
            "runs in this process, unsandboxed: trusted environments only; needs no Docker)."
        ),
    ] = "container",
    state: Annotated[
        Path | None, typer.Option(help="JSON file with the initial state.", show_default=False)
    ] = None,
    snapshot: Annotated[
        str | None, typer.Option(help="Start from this snapshot id instead.", show_default=False)
    ] = None,
    detach: Annotated[
        bool, typer.Option("--detach", "-d", help="Ask the running daemon to lease it, and return.")
    ] = False,
    ttl: Annotated[
        float | None,
        typer.Option(
            help="Lease in seconds (default: the daemon's with --detach, else until Ctrl-C).",
            show_default=False,
        ),
    ] = None,
    port: Annotated[int, typer.Option(help="Gateway port in the foreground (0: any free one).")] = 0,
    allow_host: AllowHost = None,
    cors_origin: CorsOrigin = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the sandbox as one JSON line.")] = False,
) -> None:
    """Start a sandbox and print its MCP URL and token for an external agent."""
    if isolation not in TIERS:
        raise fail(f"bad --isolation {isolation!r}", f"one of {', '.join(TIERS)}", 2)
    if ttl is not None and ttl <= 0:
        raise fail(f"bad --ttl {ttl:g}", "a lease in seconds, more than 0", 2)
    if state is not None and snapshot is not None:
        raise fail("--state and --snapshot both given", "start from one of them", 2)
    if detach and (allow_host or cors_origin):
        raise fail(
            "--allow-host and --cors-origin with --detach",
            "they are the daemon's settings then: pass them to `envreg serve`",
            2,
        )
    initial = _read_state(state)
    if isolation == "local":
        if detach or snapshot is not None:
            raise fail(
                "--isolation local runs in the foreground from a state",
                "drop --detach and --snapshot, or use --isolation instance|container",
                2,
            )
        _run_local(env, initial, port, as_json)
    elif detach:
        _run_detached(env, isolation, initial, snapshot, ttl, as_json)
    else:
        access = {"allowed_hosts": allow_host or (), "cors_origins": cors_origin or ()}
        _run_foreground(env, isolation, initial, snapshot, ttl, port, as_json, access)


def _run_detached(
    env: str, isolation: str, state: Any, snapshot: str | None, ttl: float | None, as_json: bool
) -> None:
    from envreg.daemon.client import DaemonError, DaemonNotRunning

    with _client() as client:
        try:
            info = client.create(env, isolation, state=state, snapshot=snapshot, ttl=ttl)
        except (DaemonNotRunning, DaemonError) as exc:
            raise _daemon_failed(exc) from None
    _print_sandbox(info, as_json, detached=True)


def _run_local(env: str, state: dict[str, Any] | None, port: int, as_json: bool) -> None:
    """The environment server in this process on 127.0.0.1 (`envreg.server.local`), one instance from
    `state`: its MCP URL and token, until Ctrl-C."""
    import anyio

    from envreg.env import load_environment
    from envreg.errors import InvalidState
    from envreg.server.local import local_sandbox

    environment = load_environment(env)

    async def main() -> None:
        try:
            async with local_sandbox(environment, state, port) as sb:
                _print_sandbox(
                    {
                        k: getattr(sb, k)
                        for k in ("id", "env", "env_digest", "isolation", "mcp_url", "token", "expires_at")
                    },
                    as_json,
                    detached=False,
                )
                if not as_json:
                    err.print("serving in this process (local tier: not sandboxed); Ctrl-C stops it")
                with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                    async for _ in signals:
                        break
        except InvalidState as exc:
            detail = "".join(f"\n  {e.get('loc')}: {e.get('msg')}" for e in exc.errors[:10])
            raise fail(
                f"the initial state was refused{detail}",
                "fix the --state file, or leave it out to start from the environment's seed",
            ) from None

    try:
        anyio.run(main)
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


def _run_foreground(
    env: str,
    isolation: str,
    state: Any,
    snapshot: str | None,
    ttl: float | None,
    port: int,
    as_json: bool,
    access: dict[str, Any],
) -> None:
    import anyio

    from envreg.errors import EnvregError, InvalidState
    from envreg.runtime import Runtime

    async def main() -> None:
        async with Runtime(gateway=True, gateway_port=port, lease_ttl=ttl or FOREVER, **access) as rt:
            start: Any = state
            try:
                if snapshot is not None:
                    start = rt.snapshots.get(snapshot)
                sb = await rt.sandbox(env, isolation=isolation, state=start, ttl=ttl)  # type: ignore[arg-type]
            except InvalidState as exc:
                detail = "".join(
                    f"\n  {'.'.join(map(str, e.get('loc', [])))}: {e.get('msg')}" for e in exc.errors[:10]
                )
                raise fail(
                    f"the initial state was refused{detail}",
                    "fix the --state file, or leave it out to start from the environment's seed",
                ) from None
            except EnvregError as exc:
                raise fail(exc.message, exc.hint) from None
            _print_sandbox(
                {
                    "id": sb.id,
                    "env": sb.env,
                    "env_digest": sb.env_digest,
                    "isolation": sb.isolation,
                    "mcp_url": sb.mcp_url,
                    "token": sb.token,
                    "expires_at": sb.expires_at,
                    "runtime": rt.id,
                },
                as_json,
                detached=False,
            )
            if not as_json:
                err.print("serving; Ctrl-C stops it and removes the sandbox")
            with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                async with anyio.create_task_group() as tg:

                    async def on_signal() -> None:
                        async for _ in signals:
                            tg.cancel_scope.cancel()

                    async def on_end() -> None:
                        while sb.ended is None:
                            await anyio.sleep(0.5)
                        err.print(f"sandbox {sb.id} ended: {sb.ended}")
                        tg.cancel_scope.cancel()

                    tg.start_soon(on_signal)
                    tg.start_soon(on_end)
        err.print(f"removed sandbox {sb.id}")

    try:
        anyio.run(main)
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


# ps / logs / stop --------------------------------------------------------------------------------
def ps(quiet: QuietOpt = False, as_json: JsonOpt = False) -> None:
    """List the daemon's sandboxes."""
    from envreg.daemon.client import DaemonError, DaemonNotRunning

    with _client() as client:
        try:
            sandboxes = client.list()
        except (DaemonNotRunning, DaemonError) as exc:
            raise _daemon_failed(exc) from None
    out = _out()
    if as_json:
        print(json.dumps(sandboxes))
        return
    if quiet:
        for sb in sandboxes:
            print(sb["id"])
        return
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("SANDBOX ID", "ENV", "ISOLATION", "EXPIRES", "MCP URL"):
        table.add_column(column, no_wrap=True)
    for sb in sorted(sandboxes, key=lambda s: s.get("expires_at") or 0):
        table.add_row(
            sb["id"], sb["env"], sb["isolation"], expires_in(sb.get("expires_at")), sb.get("mcp_url") or "-"
        )
    out.print(table)


def logs(
    sandbox_id: Annotated[str, typer.Argument(metavar="SANDBOX", help="A sandbox id (see `envreg ps`).")],
    tail: Annotated[int, typer.Option("--tail", "-n", min=1, help="How many of the last lines.")] = 200,
    as_json: JsonOpt = False,
) -> None:
    """Print the log of a sandbox's environment server (its container's output).

    On the instance tier the container is shared: its log holds every sandbox it serves."""
    from envreg.daemon.client import DaemonError, DaemonNotRunning

    with _client() as client:
        try:
            text = client.logs(sandbox_id, tail)
        except (DaemonNotRunning, DaemonError) as exc:
            raise _daemon_failed(exc) from None
    if as_json:
        print_json({"id": sandbox_id, "log": text})
        return
    sys.stdout.write(text if not text or text.endswith("\n") else text + "\n")


def stop(
    ids: Annotated[
        list[str] | None, typer.Argument(help="Sandbox ids (see `envreg ps`).", show_default=False)
    ] = None,
    every: Annotated[bool, typer.Option("--all", help="Stop every sandbox the daemon leases.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Stop sandboxes the daemon leases (their containers or instances are removed)."""
    from envreg.daemon.client import DaemonError, DaemonNotRunning

    if bool(ids) == every:
        raise fail(
            "name the sandboxes to stop, or pass --all", "`envreg stop ID...` or `envreg stop --all`", 2
        )
    stopped, failed = [], 0
    with _client() as client:
        try:
            targets = [sb["id"] for sb in client.list()] if every else list(ids or ())
        except (DaemonNotRunning, DaemonError) as exc:
            raise _daemon_failed(exc) from None
        for sandbox_id in targets:
            try:
                client.delete(sandbox_id)
            except DaemonNotRunning as exc:
                raise _daemon_failed(exc) from None
            except DaemonError as exc:
                failed += 1
                _daemon_failed(exc)
                continue
            stopped.append(sandbox_id)
            if not as_json:
                print(sandbox_id, flush=True)
    if as_json:
        print_json({"stopped": stopped, "failed": failed})
    if failed:
        raise typer.Exit(1)


# gc -----------------------------------------------------------------------------------------------
def gc(
    everything: Annotated[
        bool, typer.Option("--all", help="Remove every envreg container and network, live runtimes' too.")
    ] = False,
    grace: Annotated[
        float, typer.Option(help="Seconds a runtime's keeper must have been gone before its resources go.")
    ] = DEFAULT_GRACE,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", "-n", help="Print what would be removed; remove nothing.")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Remove envreg containers, networks and socket folders whose runtime has ended (or whose hard expiry passed).

    A runtime is alive while its keeper container runs: the keeper exits when the runtime's connection
    to the engine closes, wherever that runtime runs (this host, another container, another host).
    """
    from envreg.docker_engine import docker_client
    from envreg.runtime.backends.docker_keeper import collect_garbage

    client = docker_client()
    if everything and not dry_run:
        err.print("[yellow]warning:[/] --all removes the containers of live runtimes and daemons too")
    garbage = collect_garbage(client, everything=everything, grace=grace, dry_run=dry_run)
    if as_json:
        print_json({**dataclasses.asdict(garbage), "dry_run": dry_run})
    else:
        verb = "would remove" if dry_run else "removed"
        for name in garbage.containers:
            print(f"{verb} container {name}")
        for name in garbage.networks:
            print(f"{verb} network {name}")
        for path in garbage.folders:
            print(f"{verb} socket folder {path}")
        for name in garbage.rules:
            print(f"removed the firewall rule of network {name} (the network was already gone)")
        for k in garbage.kept:
            when = dt.datetime.fromtimestamp(k.until, dt.UTC).strftime("%H:%M:%S UTC")
            print(
                f"kept {k.containers} container(s) and {k.networks} network(s) of runtime {k.runtime}: it ended "
                f"less than {grace:g} s ago; gc removes them from {when} (`envreg gc --grace 0`: now)"
            )
        g = garbage
        if not any((g.containers, g.networks, g.folders, g.rules, g.kept, g.stuck)):
            print("nothing to remove")
        elif garbage.containers or garbage.networks:
            err.print(f"{verb} {len(garbage.containers)} container(s) and {len(garbage.networks)} network(s)")
    for line in garbage.stuck:
        err.print(f"[yellow]warning:[/] {escape(line)}")
    if garbage.failed:
        raise fail(
            "could not remove " + "; ".join(garbage.failed),
            "see `docker network inspect NAME` for what holds it, then run `envreg gc` again",
        )


def register(app: typer.Typer) -> None:
    app.command("serve")(serve)
    app.command("run")(run_cmd)
    app.command("ps")(ps)
    app.command("logs")(logs)
    app.command("stop")(stop)
    app.command("gc")(gc)
