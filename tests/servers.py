"""Start real environment servers (`envreg serve-env` subprocesses on loopback) for tests."""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
from warm_start import WarmProcess

from envreg.http.client import request
from envreg.server.listen import LISTEN_EXIT

MODERN = "2026-07-28"


# generous: on a loaded 2-core host (two xdist workers, their servers, the engine) a first call can take
# seconds; the tests check behaviour, not latency (bench/ measures that)
START_S = 120
ANSWER_S = 30


@contextlib.contextmanager
def ctrl_c_as_from_a_terminal() -> Iterator[None]:
    """Children started meanwhile take SIGINT as a terminal's foreground job does. (A shell starts a
    background job, such as a CI run, with SIGINT ignored; its children, these tests' included, inherit that,
    and Python then leaves it ignored.)"""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)  # a handler: exec resets it to default
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


class PortTaken(RuntimeError):
    """The server could not bind a port that was free a moment before."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class EnvServerProcess:
    env: str
    token: str = field(default_factory=lambda: f"test-{secrets.token_hex(8)}")
    """Its own: another worker's server that took the probed port before this one bound it refuses the health
    check (401), so `start` waits for this server's exit (LISTEN_EXIT) and picks new ports, never talking to
    the other one (a CI run served bfcl-gorilla-file-system's tests from bfcl-math-api's server)."""
    fast_path: bool = True
    extra: list[str] = field(default_factory=list)
    environ: dict[str, str] = field(default_factory=dict)
    image_entry: bool = False
    """Start it as images do (`python -m envreg.server`), not through the CLI (`envreg serve-env`)."""
    cwd: Path | None = None
    """Where it starts (`python -m` puts that folder first on sys.path: another checkout's envreg)."""
    port: int = 0
    control_port: int = 0
    proc: subprocess.Popen[bytes] | WarmProcess | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def control_url(self) -> str:
        return f"http://127.0.0.1:{self.control_port}"

    @property
    def auth(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self.token}"}

    def start(self) -> EnvServerProcess:
        """Start it on two free ports; another process can take a port between the probe and the server's
        bind (the server then exits with LISTEN_EXIT), so a start that loses that race picks new ports."""
        for _ in range(3):
            try:
                return self._start()
            except PortTaken:
                continue
        return self._start()

    def _start(self) -> EnvServerProcess:
        self.port, self.control_port = free_port(), free_port()
        args = [self.env, "--port", str(self.port), "--control-port", str(self.control_port)]
        args += ["--token", self.token, *self.extra, *([] if self.fast_path else ["--no-fast-path"])]
        environ = {**os.environ, "PYTHONUNBUFFERED": "1", **self.environ}
        if self.image_entry or self.cwd is not None:  # a new interpreter
            entry = ["envreg.server"] if self.image_entry else ["envreg.cli.main", "serve-env"]
            self.proc = subprocess.Popen([sys.executable, "-m", *entry, *args], cwd=self.cwd, env=environ)
        else:
            self.proc = WarmProcess(["serve-env", *args], environ)
        deadline = time.monotonic() + START_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                if self.proc.returncode == LISTEN_EXIT:
                    raise PortTaken(
                        f"port {self.port} or {self.control_port} was taken before the server bound it"
                    )
                raise RuntimeError(f"the environment server exited with {self.proc.returncode}")
            try:
                health = request("GET", f"{self.control_url}/healthz", headers=self.auth, timeout=1)
                if health.status_code == 200:
                    return self
            except httpx2.TransportError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"the environment server did not come up within {START_S} s")

    def stop(self) -> None:
        stop_all([self])

    def new_instance(self, state: dict[str, Any] | None = None) -> str:
        body = {"state": state} if state is not None else {}
        r = request(
            "POST",
            f"{self.control_url}/instances",
            json=body,
            headers=self.auth,
            timeout=ANSWER_S,
        )
        assert r.status_code == 201, r.text
        return r.json()["id"]

    def state(self, instance_id: str) -> dict[str, Any]:
        r = request(
            "GET",
            f"{self.control_url}/instances/{instance_id}/state",
            headers=self.auth,
            timeout=ANSWER_S,
        )
        assert r.status_code == 200, r.text
        return r.json()

    def mcp_url(self, instance_id: str) -> str:
        return f"{self.url}/i/{instance_id}/mcp"


def modern_request(
    method: str, params: dict[str, Any] | None = None, rid: int | str = 1
) -> tuple[dict, dict]:
    """A raw 2026-07-28 JSON-RPC request body and its headers."""
    params = dict(params or {})
    params["_meta"] = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    headers = {
        "content-type": "application/json",
        "accept": "application/json, text/event-stream",
        "mcp-protocol-version": MODERN,
        "mcp-method": method,
    }
    if method == "tools/call":
        headers["mcp-name"] = params["name"]
    return {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}, headers


def stop_all(servers: Iterable[EnvServerProcess]) -> None:
    """Stop servers at once: each is told before any is waited for (a server takes a tick and a grace to end)."""
    running = [s.proc for s in servers if s.proc and s.proc.poll() is None]
    for proc in running:
        proc.terminate()
    for proc in running:
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
