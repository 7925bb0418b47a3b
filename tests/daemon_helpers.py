"""Start a real `envreg serve` daemon (a subprocess on loopback) for tests."""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
from servers import free_port
from warm_start import WarmProcess

from envreg.http.client import request as http_request


@dataclass
class DaemonProcess:
    home: Path
    token: str = "t"
    extra: list[str] = field(default_factory=list)
    port: int = 0
    proc: WarmProcess | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def env(self) -> dict[str, str]:
        env = {**os.environ, "ENVREG_HOME": str(self.home)}
        env.pop("ENVREG_DAEMON_URL", None)
        return env

    def start(self, timeout: float = 120.0) -> DaemonProcess:
        self.port = free_port()
        args = ["serve", "--port", str(self.port), "--token", self.token, *self.extra]
        self.proc = WarmProcess(args, self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"envreg serve exited: {self.proc.stdout.read().decode()}")
            if (self.home / "daemon.json").exists():
                try:
                    if self.request("GET", "/v1/healthz").status_code == 200:
                        return self
                except httpx2.TransportError:
                    pass
            time.sleep(0.05)
        self.stop()
        raise RuntimeError("envreg serve did not start")

    def request(self, method: str, path: str, body: Any = None, token: str | None = None) -> httpx2.Response:
        headers = {"authorization": f"Bearer {self.token if token is None else token}"}
        if token == "":
            headers = {}
        return http_request(method, self.url + path, json=body, headers=headers, timeout=120)

    def ok(self, method: str, path: str, body: Any = None, status: int = 200) -> Any:
        response = self.request(method, path, body)
        assert response.status_code == status, response.text
        return response.json() if response.content else None

    def stop(self) -> str:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.stdout.read().decode() if self.proc and self.proc.stdout else ""

    def daemon_record(self) -> dict[str, Any]:
        return json.loads((self.home / "daemon.json").read_text())
