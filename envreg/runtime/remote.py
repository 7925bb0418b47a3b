"""`EnvClient`: the runtime's own client for one environment server (agent plane + control plane)."""

from __future__ import annotations

import json
from itertools import count
from typing import Any

import httpx2

from envreg.env import ToolResult, UnknownToolError
from envreg.runtime.errors import InvalidState, SandboxGone

MODERN = "2026-07-28"
_META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "envreg-runtime", "version": "1"},
}
_ids = count(1)


class EnvClient:
    """Speaks MCP (2026-07-28, JSON) to an agent plane and REST to its control plane."""

    def __init__(self, http: httpx2.AsyncClient, agent_url: str, control_url: str, token: str) -> None:
        self.http = http
        self.agent_url = agent_url.rstrip("/")
        self.control_url = control_url.rstrip("/")
        self.auth = {"authorization": f"Bearer {token}"}

    async def rpc(
        self, path: str, method: str, params: dict[str, Any], name: str | None = None
    ) -> dict[str, Any]:
        headers = {
            "content-type": "application/json",
            "accept": "application/json, text/event-stream",
            "mcp-protocol-version": MODERN,
            "mcp-method": method,
        }
        if name is not None:
            headers["mcp-name"] = name
        body = {"jsonrpc": "2.0", "id": next(_ids), "method": method, "params": {**params, "_meta": _META}}
        response = await self.http.post(self.agent_url + path, content=json.dumps(body), headers=headers)
        if response.status_code == 404:
            raise SandboxGone(f"the environment server has no instance at {path}")
        message = response.json()
        if "error" in message:
            error = message["error"]
            if error.get("code") == -32602 and "Unknown tool" in error.get("message", ""):
                raise UnknownToolError(name or "", [])
            raise RuntimeError(f"{method} failed: {error.get('message')} (code {error.get('code')})")
        return message["result"]

    async def list_tools(self, path: str) -> list[dict[str, Any]]:
        return (await self.rpc(path, "tools/list", {}))["tools"]

    async def call_tool(self, path: str, name: str, arguments: dict[str, Any] | None) -> ToolResult:
        result = await self.rpc(path, "tools/call", {"name": name, "arguments": arguments or {}}, name=name)
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
        response = await self.http.request(method, self.control_url + path, content=content, headers=headers)
        if response.status_code == 422:
            data = response.json()
            raise InvalidState(data.get("error", "invalid state"), data.get("errors"))
        if response.status_code == 404:
            raise SandboxGone(f"the environment server has no {path}")
        if response.status_code not in expect:
            raise RuntimeError(f"{method} {path}: HTTP {response.status_code}: {response.text[:300]}")
        return response.json() if response.content else None

    async def create_instance(self, state: dict[str, Any] | None = None) -> str:
        body = {"state": state} if state is not None else {}
        return (await self.control("POST", "/instances", body, expect=(201,)))["id"]

    async def delete_instance(self, instance_id: str) -> None:
        await self.control("DELETE", f"/instances/{instance_id}", expect=(204,))

    async def get_state(self, instance_id: str) -> dict[str, Any]:
        return await self.control("GET", f"/instances/{instance_id}/state")

    async def put_state(self, instance_id: str, state: dict[str, Any]) -> dict[str, Any]:
        return await self.control("PUT", f"/instances/{instance_id}/state", state)

    async def reset(self, instance_id: str) -> dict[str, Any]:
        return await self.control("POST", f"/instances/{instance_id}/reset")

    async def augment(self, instance_id: str, config: Any) -> None:
        if config is None:
            await self.control("DELETE", f"/instances/{instance_id}/augmentation", expect=(204,))
        else:
            await self.control(
                "PUT", f"/instances/{instance_id}/augmentation", config.model_dump(mode="json")
            )

    async def augmentation(self, instance_id: str) -> dict[str, Any]:
        return await self.control("GET", f"/instances/{instance_id}/augmentation")

    async def healthz(self) -> dict[str, Any]:
        return await self.control("GET", "/healthz")
