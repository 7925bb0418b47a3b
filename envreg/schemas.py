"""JSON Schemas of envreg's file formats and the OpenAPI documents of its HTTP fronts, from the code.

`envreg schema NAME` prints one; the committed copies under `schemas/` (`envreg schema --write schemas`) are
checked against the code by `envreg schema --check schemas` (CI) and the tests, so that a change of a
format is seen in review, like a manifest's.

| name | what |
| --- | --- |
| `manifest` | `manifests/<name>.json`, `/env/manifest.json` (`envreg.manifest.Manifest`) |
| `scenario` | `images/<name>/scenarios/*.json` (`envreg.env.scenario.Scenario`) |
| `rejected-state` | `images/<name>/scenarios/rejected/*.json` (`envreg.env.scenario.RejectedState`) |
| `trajectory` | one line of `trajectories.jsonl` (`envreg.synth.records.Trajectory`) |
| `lock` | `envreg.lock` (`envreg.registry.lockfile.Lockfile`) |
| `openapi-daemon` | the REST API of `envreg serve` (`/openapi.json`, default tiers) |
| `openapi-reward` | the REST API of `envreg reward serve` (`/openapi.json`) |
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

DRAFT = "https://json-schema.org/draft/2020-12/schema"
DIGEST = r"^sha256:[0-9a-f]{64}$"


def _model_schema(model: type[BaseModel], title: str) -> dict[str, Any]:
    schema = model.model_json_schema(mode="validation")
    return {"$schema": DRAFT, "title": title, **{k: v for k, v in schema.items() if k != "title"}}


def manifest() -> dict[str, Any]:
    from envreg.manifest import Manifest

    return _model_schema(Manifest, "envreg environment manifest")


def scenario() -> dict[str, Any]:
    from envreg.env.scenario import Scenario

    return _model_schema(Scenario, "envreg validation scenario")


def rejected_state() -> dict[str, Any]:
    from envreg.env.scenario import RejectedState

    return _model_schema(RejectedState, "envreg rejected state")


def trajectory() -> dict[str, Any]:
    from envreg.synth.records import Trajectory

    return _model_schema(Trajectory, "envreg trajectory record")


def lock() -> dict[str, Any]:
    from envreg.registry.lockfile import LOCK_VERSION

    class LockedEnvironment(BaseModel):
        """One pinned environment: what `envreg pull --locked` installs and checks."""

        model_config = ConfigDict(extra="forbid")
        name: str
        version: str
        image_id: str = Field(pattern=DIGEST, description="The image ID (config digest).")
        manifest_digest: str = Field(pattern=DIGEST, description="What its manifest hashes to.")
        repository: str | None = Field(default=None, description='"host[:port]/path" it is pulled from.')
        repo_digest: str | None = Field(
            default=None, pattern=DIGEST, description="The registry manifest digest."
        )

    class Lock(BaseModel):
        """`envreg.lock`: a suite of environments pinned by digest (`envreg lock`)."""

        model_config = ConfigDict(extra="forbid")
        lock_version: Literal[1] = LOCK_VERSION  # type: ignore[assignment]
        environments: list[LockedEnvironment]

    return _model_schema(Lock, "envreg lockfile")


def openapi_daemon() -> dict[str, Any]:
    from envreg.daemon.app import DaemonSettings, create_api

    api = create_api(None, DaemonSettings(token="-"))  # type: ignore[arg-type]  # routes only, never served
    return api.state.openapi_document()


def openapi_reward() -> dict[str, Any]:
    from envreg.reward.server import RewardServerConfig, create_app

    return create_app(RewardServerConfig(token="-")).openapi()


SCHEMAS: dict[str, Callable[[], dict[str, Any]]] = {
    "manifest": manifest,
    "scenario": scenario,
    "rejected-state": rejected_state,
    "trajectory": trajectory,
    "lock": lock,
    "openapi-daemon": openapi_daemon,
    "openapi-reward": openapi_reward,
}


def file_name(name: str) -> str:
    """Where `name` is committed under `schemas/`."""
    kind, _, front = name.partition("-")
    return f"{front}.openapi.json" if kind == "openapi" else f"{name}.schema.json"


def dumps(document: dict[str, Any]) -> str:
    return json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def stale(folder: Path) -> list[str]:
    """The names whose committed copy under `folder` is missing or differs from the code's."""
    out = []
    for name, build in SCHEMAS.items():
        path = folder / file_name(name)
        if not path.is_file() or path.read_text() != dumps(build()):
            out.append(name)
    return out


def write(folder: Path) -> list[Path]:
    """Write every schema under `folder`; returns the files that changed."""
    folder.mkdir(parents=True, exist_ok=True)
    changed = []
    for name, build in SCHEMAS.items():
        path, text = folder / file_name(name), dumps(build())
        if not path.is_file() or path.read_text() != text:
            path.write_text(text)
            changed.append(path)
    return changed
