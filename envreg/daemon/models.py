"""Request and response bodies of the daemon's REST control API (they make its OpenAPI document)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from envreg.env.augment import Augmentation
from envreg.protocol import Isolation

MAX_TTL = 30 * 24 * 3600.0
SNAPSHOT_REF = r"^(sha256:)?[0-9a-f]{4,64}$"
# an environment name, name:version, name@sha256:<id>, or an image reference
ENV_REF = r"^[A-Za-z0-9][A-Za-z0-9._/:@+-]{0,254}$"

Ttl = Field(
    default=None,
    gt=0,
    le=MAX_TTL,
    description="Lease length in seconds (default: the daemon's --lease-ttl). The sandbox ends when it runs out.",
)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Error(BaseModel):
    """Every error the API returns."""

    error: str = Field(description="What went wrong.")
    hint: str | None = Field(default=None, description="What to do about it, where there is something to do.")
    errors: list[dict[str, Any]] | None = Field(
        default=None, description="Each problem, for an invalid request or an invalid state."
    )


class CreateSandbox(_Strict):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"not": {"required": ["state", "snapshot"]}})

    env: str = Field(
        pattern=ENV_REF,
        description="Environment: a name (its newest image), name:version, name@sha256:<image id>, or an image reference.",
        examples=["calendar"],
    )
    isolation: Isolation = Field(
        default="container", description="Isolation tier (the daemon's document lists those it allows)."
    )
    state: dict[str, Any] | None = Field(
        default=None, description="Initial state (validated; refused whole)."
    )
    snapshot: str | None = Field(
        default=None,
        pattern=SNAPSHOT_REF,
        description="Start from this snapshot (id or unique prefix) instead.",
    )
    ttl: float | None = Ttl
    augment: Augmentation | None = Field(
        default=None,
        description="Oracle-preserving augmentation of the tool results (formats, noise, injected errors, "
        "distractor tools); labels at GET /v1/sandboxes/{id}/augmentation.",
    )


class SandboxInfo(BaseModel):
    id: str
    env: str
    env_digest: str
    isolation: Isolation
    mcp_url: str | None = Field(
        description="MCP streamable HTTP endpoint (Docker tiers), through the gateway."
    )
    token: str | None = Field(description="Bearer token for mcp_url; only this sandbox accepts it.")
    expires_at: float | None = Field(description="When the lease ends (epoch seconds).")


class StateBody(_Strict):
    state: dict[str, Any] = Field(
        description="The whole state, as the environment's state schema describes it."
    )


class StateInfo(BaseModel):
    sha256: str = Field(description="sha256 of the canonical JSON of the state.")
    state: dict[str, Any]


class SnapshotInfo(BaseModel):
    id: str = Field(description='"sha256:<hex>", the content address.')
    sha256: str
    env: str
    env_digest: str


class RestoreBody(_Strict):
    snapshot: str = Field(pattern=SNAPSHOT_REF, description="Snapshot id or a unique prefix of it.")


class RenewBody(_Strict):
    ttl: float = Field(gt=0, le=MAX_TTL, description="New lease length in seconds, from now.")


class RenewInfo(BaseModel):
    id: str
    expires_at: float


class ForkBody(_Strict):
    snapshot: str = Field(pattern=SNAPSHOT_REF, description="Snapshot every fork starts from.")
    n: int = Field(ge=1, le=1024, description="How many sandboxes.")
    isolation: Isolation = "container"
    ttl: float | None = Ttl


class CallBody(_Strict):
    name: str = Field(min_length=1, max_length=256, description="Tool name.")
    arguments: dict[str, Any] = Field(default_factory=dict)


class CallToolResult(BaseModel):
    """The MCP `CallToolResult` wire form."""

    model_config = ConfigDict(populate_by_name=True, serialize_by_alias=True)

    content: list[dict[str, Any]]
    is_error: bool = Field(alias="isError")
    structured_content: dict[str, Any] | None = Field(default=None, alias="structuredContent")


class LogInfo(BaseModel):
    log: str = Field(description="The last lines the sandbox's environment server printed.")


class Health(BaseModel):
    status: Literal["ok"] = "ok"
    runtime: str = Field(description="The runtime id that labels this daemon's containers.")
    sandboxes: int
    max_sandboxes: int
    tiers: list[Isolation]
    gateway_url: str
    fast_path_calls: int | None = Field(
        None,
        description="MCP requests the gateway on this port relayed on its fast path (off the socket, no ASGI) "
        "since the daemon started; null when it serves every request through ASGI (a uvicorn outside the "
        "fast path's verified releases, or an app not served by `envreg serve`).",
    )
