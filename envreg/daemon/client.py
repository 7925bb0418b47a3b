"""A small synchronous client for the daemon's control API (used by `envreg run --detach`, `ps`, `stop`)."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import httpx2

from envreg.config import daemon_override
from envreg.daemon.serve import daemon_file, read_daemon_file
from envreg.http.client import sync_client

START_HINT = "start one with `envreg serve` (or `envreg serve &` to keep this shell)"


class DaemonNotRunning(RuntimeError):
    """No daemon answers where daemon.json (or $ENVREG_DAEMON_URL) says."""


class DaemonError(RuntimeError):
    """The daemon refused a request; `status` is its HTTP status."""

    def __init__(self, status: int, message: str, errors: list[Any] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.errors = errors or []


class DaemonClient:
    def __init__(self, url: str, token: str, timeout: float = 120.0) -> None:
        self.url = url.rstrip("/")
        self.http = sync_client(
            base_url=self.url,
            headers={"authorization": f"Bearer {token}"},
            timeout=timeout,
        )

    @classmethod
    def discover(cls) -> DaemonClient:
        """The daemon named by $ENVREG_DAEMON_URL + $ENVREG_TOKEN, or by $ENVREG_HOME/daemon.json."""
        url, token = daemon_override()
        if url:
            if not token:
                raise DaemonNotRunning("ENVREG_DAEMON_URL is set but ENVREG_TOKEN is not: set both")
            return cls(url, token)
        record = read_daemon_file()
        if record is None:
            stale = " (its daemon.json names a process that has exited)" if daemon_file().exists() else ""
            raise DaemonNotRunning(
                f"no envreg daemon is running for {daemon_file().parent}{stale}: {START_HINT}"
            )
        return cls(record["url"], record["token"])

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> DaemonClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request(self, method: str, path: str, body: Any = None) -> Any:
        try:
            response = self.http.request(method, path, json=body)
        except httpx2.TransportError as exc:
            raise DaemonNotRunning(
                f"the envreg daemon at {self.url} does not answer ({exc}): {START_HINT}"
            ) from None
        if response.status_code >= 400:
            try:
                data = response.json()
                message, errors = data.get("error") or response.text, data.get("errors")
            except ValueError:
                message, errors = response.text or response.reason_phrase, None
            raise DaemonError(response.status_code, message, errors)
        return response.json() if response.content else None

    # the API ------------------------------------------------------------------------------------
    def health(self) -> dict[str, Any]:
        return self.request("GET", "/v1/healthz")

    def create(
        self,
        env: str,
        isolation: str = "container",
        state: dict[str, Any] | None = None,
        snapshot: str | None = None,
        ttl: float | None = None,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"env": env, "isolation": isolation}
        if state is not None:
            body["state"] = state
        if snapshot is not None:
            body["snapshot"] = snapshot
        if ttl is not None:
            body["ttl"] = ttl
        return self.request("POST", "/v1/sandboxes", body)

    def list(self) -> list[dict[str, Any]]:
        return self.request("GET", "/v1/sandboxes")

    def get(self, sandbox_id: str) -> dict[str, Any]:
        return self.request("GET", f"/v1/sandboxes/{quote(sandbox_id, safe='')}")

    def logs(self, sandbox_id: str, tail: int) -> str:
        return self.request("GET", f"/v1/sandboxes/{quote(sandbox_id, safe='')}/logs?tail={tail}")["log"]

    def delete(self, sandbox_id: str) -> None:
        self.request("DELETE", f"/v1/sandboxes/{quote(sandbox_id, safe='')}")
