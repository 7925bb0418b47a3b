"""The manifest: what an environment image is (metadata, tools, state schema), generated from its code."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from envreg.canonical import digest
from envreg.env import Budgets, Environment, Limits, load_scenarios
from envreg.env.schema import json_schema
from envreg.protocol import AGENT_PORT, CONTROL_PORT
from envreg.source import source_digest, source_files, source_hashes

MANIFEST_SCHEMA_VERSION = 2


class ToolSpec(BaseModel):
    """One tool as an agent sees it."""

    model_config = ConfigDict(populate_by_name=True)

    name: str
    description: str
    input_schema: dict[str, Any] = Field(alias="inputSchema")
    output_schema: dict[str, Any] | None = Field(default=None, alias="outputSchema")
    annotations: dict[str, bool]


class RuntimeFacts(BaseModel):
    """How the image runs: what a runtime needs to know without starting it."""

    agent_port: int = AGENT_PORT
    control_port: int = CONTROL_PORT
    user: str = "65534:65534"
    network: str = Field(
        default="none", description="Egress the environment needs: 'none' for every verified one."
    )
    agent_path: str = "/i/{instance}/mcp"
    limits: Limits = Field(
        default_factory=Limits, description="Size limits every instance enforces (declared in code)."
    )
    budgets: Budgets | None = Field(
        default=None,
        description="Start-up and latency budgets `envreg validate` holds the image to, when declared.",
    )


class Digests(BaseModel):
    tools: str
    state_schema: str
    seed: str
    source: str = Field(
        default="", description="sha256 over the environment folder as shipped (see `source_files`)."
    )
    manifest: str = ""


class Manifest(BaseModel):
    """The generated description of an environment; `digests.manifest` covers every other field."""

    schema_version: int = MANIFEST_SCHEMA_VERSION
    name: str
    version: str
    description: str
    domain: str
    tools: list[ToolSpec]
    state_schema: dict[str, Any]
    volatile: list[str]
    scenarios: int
    rejected_states: int
    runtime: RuntimeFacts = Field(default_factory=RuntimeFacts)
    source_files: dict[str, str] = Field(
        default_factory=dict,
        description="Every file of the environment folder as shipped in /env: relative path -> sha256 (hex).",
    )
    digests: Digests

    @property
    def digest(self) -> str:
        return self.digests.manifest

    @property
    def ref(self) -> str:
        return f"{self.name}:{self.version}"

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)

    def body_digest(self) -> str:
        """sha256 of the canonical manifest with `digests.manifest` left out."""
        data = self.to_json()
        data["digests"].pop("manifest", None)
        return digest(data)

    def verify(self) -> None:
        """Raise `ValueError` when the manifest is not self-consistent: its recorded digests do not match
        its content, or it comes from another manifest format."""
        if self.schema_version != MANIFEST_SCHEMA_VERSION:
            raise ValueError(
                f"manifest {self.ref} has format version {self.schema_version}, this envreg reads "
                f"{MANIFEST_SCHEMA_VERSION}: regenerate it with `envreg manifest {self.name}` and rebuild the image"
            )
        if source_digest(self.source_files) != self.digests.source:
            raise ValueError(
                f"manifest {self.ref}: digests.source {self.digests.source or '(none)'} does not match its "
                f"source_files; regenerate it with `envreg manifest {self.name}`"
            )
        if self.body_digest() != self.digests.manifest:
            raise ValueError(
                f"manifest {self.ref}: recorded digest {self.digests.manifest} does not match its content "
                f"({self.body_digest()}); regenerate it with `envreg manifest {self.name}`"
            )

    def dumps(self) -> str:
        """The committed file form: indented, stable, newline-terminated."""
        return json.dumps(self.to_json(), indent=2, ensure_ascii=False) + "\n"

    @classmethod
    def loads(cls, text: str | bytes) -> Manifest:
        return cls.model_validate_json(text)


def build_manifest(env: Environment) -> Manifest:
    """Generate the manifest of an environment from its code, seed and scenarios."""
    tools = [ToolSpec.model_validate(t) for t in env.list_tools()]
    state_schema = json_schema(env.state_model)
    scenarios, rejected = load_scenarios(env.folder) if env.folder else ([], [])
    files = source_hashes(env.folder) if env.folder else {}
    manifest = Manifest(
        name=env.name,
        version=env.version,
        description=env.description,
        domain=env.domain,
        tools=tools,
        state_schema=state_schema,
        volatile=list(env.volatile),
        scenarios=len(scenarios),
        rejected_states=len(rejected),
        runtime=RuntimeFacts(limits=env.limits, budgets=env.budgets),
        source_files=files,
        digests=Digests(
            tools=digest([t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in tools]),
            state_schema=digest(state_schema),
            seed=digest(env.initial_state().to_json()),
            source=source_digest(files),
        ),
    )
    manifest.digests.manifest = manifest.body_digest()
    return manifest


def _folder_manifest(work: Path, payload: dict[str, Any]) -> dict[str, Any]:
    """Inside a sandbox: the manifest of the environment folder `payload["folder"]` under `work`."""
    from envreg.env import load_environment

    return build_manifest(load_environment(work / payload["folder"])).to_json()


def manifest_of(ref: str | Path) -> Manifest:
    """The manifest of the environment at `ref` (a folder or a name), generated from its code: in this process,
    or for a foreign folder (an imported tool file) in a container sandbox (`envreg.sandboxing`)."""
    from envreg.env import load_environment
    from envreg.env.loader import is_foreign, resolve_folder

    folder = resolve_folder(ref)
    if not is_foreign(folder):
        return build_manifest(load_environment(folder))
    from envreg.sandboxing import run_isolated

    files = {f"{folder.name}/{rel}": path.read_bytes() for rel, path in source_files(folder).items()}
    data = run_isolated(
        "envreg.manifest:_folder_manifest",
        {"folder": folder.name},
        files=files,
        what=f"the foreign environment {folder.name}",
    )
    manifest = Manifest.model_validate(data)
    if manifest.source_files != source_hashes(folder):  # what the sandbox read is what is here
        raise ValueError(f"{folder.name}: the sandbox saw other files than {folder} holds")
    manifest.verify()
    return manifest


def manifest_path(name: str, out_dir: Path = Path("manifests")) -> Path:
    return out_dir / f"{name}.json"


def check_manifest(env: Environment | Manifest, out_dir: Path = Path("manifests")) -> str | None:
    """None when the committed manifest is current, else why it is not (`env`: an environment, or its manifest)."""
    path = manifest_path(env.name, out_dir)
    if not path.is_file():
        return f"{path} is missing"
    try:
        committed = Manifest.loads(path.read_text())
    except ValueError as exc:
        return f"{path} is not a valid manifest: {exc}"
    fresh = env if isinstance(env, Manifest) else build_manifest(env)
    if committed.digests.manifest != fresh.digests.manifest or committed.dumps() != fresh.dumps():
        changed = [
            k
            for k in ("tools", "state_schema", "seed", "source")
            if getattr(committed.digests, k) != getattr(fresh.digests, k)
        ]
        what = ", ".join(f"{k} changed" for k in changed) if changed else "metadata changed"
        return f"{path} is stale ({what}): {committed.digests.manifest} -> {fresh.digests.manifest}"
    return None


def write_manifest(
    env: Environment | Manifest, out_dir: Path = Path("manifests")
) -> tuple[Path, Manifest, bool]:
    """Write the manifest file (of an environment, or a manifest made already); returns (path, manifest,
    whether the file changed)."""
    manifest = env if isinstance(env, Manifest) else build_manifest(env)
    path = manifest_path(env.name, out_dir)
    text = manifest.dumps()
    changed = not path.is_file() or path.read_text() != text
    if changed:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return path, manifest, changed
