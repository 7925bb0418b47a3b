"""`EnvClient`: the runtime's own client for one environment server over HTTP (agent + control plane)."""

from __future__ import annotations

import json
from itertools import count
from typing import Any

import httpx2

from envreg.env import ToolResult
from envreg.env.augment import Augmentation
from envreg.errors import (
    InvalidState,
    LimitReached,
    SandboxGone,
    SnapshotNotFound,
    TooLarge,
    UnknownToolError,
    UpstreamConnectTimeout,
    UpstreamDropped,
    UpstreamError,
    UpstreamTimeout,
)
from envreg.protocol import (
    GENERATION_HEADER,
    MCP_VERSION,
    META_CLIENT_CAPABILITIES,
    META_CLIENT_INFO,
    META_PROTOCOL_VERSION,
    agent_path,
)
from envreg.runtime.snapshots import Snapshot

_META = {
    META_PROTOCOL_VERSION: MCP_VERSION,
    META_CLIENT_CAPABILITIES: {},
    META_CLIENT_INFO: {"name": "envreg-runtime", "version": "1"},
}
_ids = count(1)


def _refusal(response: httpx2.Response, default: str = "request body too large") -> str:
    """The message of an error answer, in any form a server sends: JSON-RPC's, ``{"error"}``, plain text."""
    try:
        data = response.json()
    except ValueError:
        return response.text.strip()[:300] or default
    error = data.get("error") if isinstance(data, dict) else None
    message = error.get("message") if isinstance(error, dict) else error
    return str(message or default)


def _ended(response: httpx2.Response) -> str:
    """The message of a 410: the server process no longer serves the sandbox the request was for."""
    return _refusal(response, "the environment server no longer serves this sandbox")


class EnvClient:
    """`ServerClient` over HTTP: MCP (2026-07-28, JSON) to the agent plane, REST to the control plane."""

    def __init__(
        self,
        http: httpx2.AsyncClient,
        agent_url: str,
        control_url: str,
        token: str,
        agent_token: str | None = None,
        generation: int | None = None,
    ) -> None:
        self.http = http
        self.agent_url = agent_url.rstrip("/")
        self.control_url = control_url.rstrip("/")
        self.token, self.agent_token, self.generation = token, agent_token, generation
        pin = {GENERATION_HEADER: str(generation)} if generation is not None else {}
        self.auth = {"authorization": f"Bearer {token}", **pin}
        self.agent_auth = {**({"authorization": f"Bearer {agent_token}"} if agent_token else {}), **pin}

    def pinned(self, generation: int | None) -> EnvClient:
        """This client for one process of a recyclable server: every other process refuses its requests
        (410, `SandboxGone`), so that nothing a sandbox sends after its end lands in the next sandbox."""
        return EnvClient(
            self.http, self.agent_url, self.control_url, self.token, self.agent_token, generation
        )

    async def _send(self, method: str, url: str, **kwargs: Any) -> httpx2.Response:
        try:
            return await self.http.request(method, url, **kwargs)
        except httpx2.TimeoutException as exc:
            timeout = self.http.timeout
            connect = isinstance(exc, httpx2.ConnectTimeout)
            limit = timeout.connect if connect else timeout.read
            waited = f"{limit:g} s" if limit else "time"
            error = UpstreamConnectTimeout if connect else UpstreamTimeout
            raise error(f"the environment server gave no answer in {waited} ({exc!r})") from None
        except httpx2.TransportError as exc:  # refused, reset
            raise UpstreamDropped(f"the environment server did not answer: {exc!r}") from None

    async def rpc(
        self, instance_id: str, method: str, params: dict[str, Any], name: str | None = None
    ) -> dict[str, Any]:
        headers = {
            "content-type": "application/json",
            "accept": "application/json, text/event-stream",
            "mcp-protocol-version": MCP_VERSION,
            "mcp-method": method,
            **self.agent_auth,
        }
        if name is not None:
            headers["mcp-name"] = name
        body = {"jsonrpc": "2.0", "id": next(_ids), "method": method, "params": {**params, "_meta": _META}}
        path = agent_path(instance_id)
        response = await self._send("POST", self.agent_url + path, content=json.dumps(body), headers=headers)
        if response.status_code == 404:
            raise SandboxGone(f"the environment server has no instance at {path}")
        if response.status_code == 410:
            raise SandboxGone(_ended(response))
        if response.status_code == 413:
            raise TooLarge(f"{method}: {_refusal(response)}")
        try:
            message = response.json()
        except ValueError:
            raise UpstreamError(
                f"{method}: HTTP {response.status_code} from the environment server: {response.text[:200]}"
            ) from None
        if "error" in message:
            error = message["error"]
            if error.get("code") == -32602 and "Unknown tool" in error.get("message", ""):
                raise UnknownToolError(name or "", [])
            raise UpstreamError(f"{method} failed: {error.get('message')} (code {error.get('code')})")
        return message["result"]

    async def list_tools(self, instance_id: str) -> list[dict[str, Any]]:
        return (await self.rpc(instance_id, "tools/list", {}))["tools"]

    async def call_tool(self, instance_id: str, name: str, arguments: dict[str, Any] | None) -> ToolResult:
        params = {"name": name, "arguments": arguments or {}}
        result = await self.rpc(instance_id, "tools/call", params, name=name)
        text = result["content"][0]["text"] if result.get("content") else ""
        if result.get("isError"):
            return ToolResult(error=text)
        try:
            value = json.loads(text) if text else None
        except ValueError:  # an augmented format (YAML, XML, markdown): the text is what the agent sees
            return ToolResult(value=text, rendered=text)
        return ToolResult(value=value, structured=result.get("structuredContent"))

    async def control(
        self, method: str, path: str, body: Any = None, expect: tuple[int, ...] = (200,)
    ) -> Any:
        content = None if body is None else json.dumps(body)
        headers = {**self.auth, "content-type": "application/json"} if content else self.auth
        response = await self._send(method, self.control_url + path, content=content, headers=headers)
        if response.status_code == 422:
            data = response.json()
            raise InvalidState(data.get("error", "invalid state"), data.get("errors"))
        if response.status_code == 404:
            raise SandboxGone(f"the environment server has no {path}")
        if response.status_code == 410:
            raise SandboxGone(_ended(response))
        if response.status_code == 413:
            raise TooLarge(_refusal(response))
        if response.status_code == 429:  # its instances or their states' memory budget: full
            raise LimitReached(response.json().get("error", "the environment server is full"))
        if response.status_code not in expect:
            raise UpstreamError(f"{method} {path}: HTTP {response.status_code}: {response.text[:300]}")
        return response.json() if response.content else None

    async def create_instance(self, state: dict[str, Any] | None = None) -> str:
        body = {"state": state} if state is not None else {}
        return (await self.control("POST", "/instances", body, expect=(201,)))["id"]

    async def delete_instance(self, instance_id: str) -> None:
        await self.control("DELETE", f"/instances/{instance_id}", expect=(204,))

    async def get_state(self, instance_id: str) -> dict[str, Any]:
        return (await self.control("GET", f"/instances/{instance_id}/state"))["state"]

    async def state_sha256(self, instance_id: str) -> str:
        return (await self.control("GET", f"/instances/{instance_id}/state"))["sha256"]

    async def put_state(self, instance_id: str, state: dict[str, Any]) -> None:
        await self.control("PUT", f"/instances/{instance_id}/state", state)

    async def reset(self, instance_id: str) -> None:
        await self.control("POST", f"/instances/{instance_id}/reset")

    async def snapshot(self, instance_id: str) -> str:
        return (await self.control("POST", f"/instances/{instance_id}/snapshot"))["sha256"]

    async def snapshot_payload(self, sha256: str) -> bytes:
        response = await self._send("GET", f"{self.control_url}/snapshots/{sha256}", headers=self.auth)
        if response.status_code == 404:
            raise SnapshotNotFound(f"the environment server does not keep snapshot {sha256[:12]}...")
        if response.status_code != 200:
            raise UpstreamError(f"GET /snapshots: HTTP {response.status_code}: {response.text[:300]}")
        return response.content  # gzip on the wire, decoded by the client

    async def restore(self, instance_id: str, sha256: str) -> bool:
        response = await self._send(
            "POST",
            f"{self.control_url}/instances/{instance_id}/restore",
            content=json.dumps({"snapshot": sha256}),
            headers={**self.auth, "content-type": "application/json"},
        )
        if response.status_code == 200:
            return True
        if response.status_code == 410:
            raise SandboxGone(_ended(response))
        if response.status_code == 404:
            if response.json().get("missing_snapshot"):
                return False
            raise SandboxGone(f"the environment server has no instance {instance_id!r}")
        raise UpstreamError(
            f"POST /instances/.../restore: HTTP {response.status_code}: {response.text[:300]}"
        )

    async def upload_snapshot(self, snapshot: Snapshot) -> None:
        response = await self._send(
            "PUT",
            f"{self.control_url}/snapshots/{snapshot.sha256}",
            content=snapshot.gzip,
            headers={**self.auth, "content-type": "application/json", "content-encoding": "gzip"},
        )
        if response.status_code == 422:
            data = response.json()
            raise InvalidState(data.get("error", "invalid state"), data.get("errors"))
        if response.status_code == 413:
            raise TooLarge(response.json().get("error", "snapshot too large for the environment server"))
        if response.status_code != 201:
            raise UpstreamError(f"PUT /snapshots: HTTP {response.status_code}: {response.text[:300]}")

    async def augment(self, instance_id: str, config: Augmentation | None) -> None:
        path = f"/instances/{instance_id}/augmentation"
        if config is None:
            await self.control("DELETE", path, expect=(204,))
        else:
            await self.control("PUT", path, config.model_dump(mode="json"))

    async def augmentation_labels(self, instance_id: str) -> list[dict[str, Any]]:
        return (await self.control("GET", f"/instances/{instance_id}/augmentation"))["labels"]

    async def healthz(self) -> dict[str, Any]:
        return await self.control("GET", "/healthz")

    async def recycle(self) -> int:
        """Ask a recyclable server for a fresh process; returns the generation of the one ending."""
        return (await self.control("POST", "/recycle", expect=(202,)))["generation"]
