"""The revise loop: draft -> sandbox inspection -> image build -> `envreg validate` -> report -> revision.

Each revision is executed: its files are imported and its scenarios recorded in a container sandbox (no
network, non-root, each call under a time limit), and unless it does not import or a call hangs, its folder
is built into an image and validated on real containers. A revision that does not import cannot be built
(`envreg build` imports it to write its manifest), and one whose call hangs would hold `envreg validate`'s
calls; both are reported from the sandbox. The failures of all stages make the report the next request
shows the model, until a revision passes or the budget is spent.

Everything is written under the output folder (`Options.out`):

```
OUT/<name>/               the environment folder of the passing revision (else of the last one built)
OUT/manifests/<name>.json its manifest
OUT/revisions/NN/         each revision: draft/ (the files as the model wrote them), <name>/ (as built: the
                          scenarios recorded), manifests/, report.json (its failures and timings),
                          validate.json (envreg validate's report)
OUT/metadata.json         the metadata the model wrote, when the input was a brief
OUT/envgen.json           the run: input, model, every revision's summary, the result, the LLM's counters
```
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from envreg.envgen.draft import MARKER, Draft, write_files
from envreg.envgen.image import BuildFailed, build_image
from envreg.envgen.inspect import Inspection
from envreg.envgen.prompts import METADATA_SYSTEM, WRITE_SYSTEM, metadata_prompt, write_prompt
from envreg.envgen.report import Failure, for_model, from_validation, metadata_failures
from envreg.envgen.spec import Brief, Spec, SpecProblem, from_metadata
from envreg.errors import Conflict, EnvregError
from envreg.protocol import FOREIGN_MARKER
from envreg.synth.llm import LLMConfig, chat_json

LOG_FORMAT = "envreg.envgen"


@dataclass
class Options:
    """Where the run writes and what it allows each stage."""

    out: Path
    revisions: int = 5
    call_timeout: float = 10.0
    sandbox_timeout: float = 300.0
    build_timeout: float = 1800.0
    validate_timeout: float = 900.0
    force: bool = False


@dataclass
class Revision:
    """What one revision did: its failures (empty: it passed), its image, and where its time went."""

    number: int
    failures: list[Failure] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)
    image_id: str | None = None
    manifest_digest: str | None = None
    built: bool = False
    validated: bool = False
    notes: str = ""

    @property
    def passed(self) -> bool:
        return self.validated and not self.failures

    @property
    def failed_checks(self) -> list[str]:
        return sorted({f.check for f in self.failures})

    def to_json(self) -> dict[str, Any]:
        return {
            "revision": self.number,
            "passed": self.passed,
            "built": self.built,
            "validated": self.validated,
            "image_id": self.image_id,
            "manifest_digest": self.manifest_digest,
            "seconds": {k: round(v, 3) for k, v in self.seconds.items()},
            "failed_checks": self.failed_checks,
            "failures": [f.brief() for f in self.failures],
            "notes": self.notes,
        }


@dataclass
class Result:
    spec: Spec
    revisions: list[Revision]
    folder: Path | None = None
    llm: dict[str, int] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return bool(self.revisions) and self.revisions[-1].passed

    @property
    def final(self) -> Revision | None:
        return next((r for r in reversed(self.revisions) if r.built), None)

    def to_json(self) -> dict[str, Any]:
        final = self.final
        return {
            "format": LOG_FORMAT,
            "version": 1,
            "name": self.spec.name,
            "passed": self.passed,
            "revisions_used": len(self.revisions),
            "seconds": round(sum(r.seconds.get("total", 0.0) for r in self.revisions), 3),
            "folder": str(self.folder) if self.folder else None,
            "image_id": final.image_id if final else None,
            "manifest_digest": final.manifest_digest if final else None,
            "spec": self.spec.model_dump(),
            "llm": self.llm,
            "revisions": [r.to_json() for r in self.revisions],
        }


Listener = Callable[[str], None]
"""Told what the run is doing, one line at a time."""


# -------------------------------------------------------------------------------------- the output
def prepare_output(out: Path, name: str, *, force: bool) -> None:
    """Make `out` ready for a run of `name`; refuse (changing nothing) when it holds another run's files, unless
    `force`, which removes only what a run writes there."""
    owned = [
        out / name,
        out / "revisions",
        out / "manifests" / f"{name}.json",
        out / "envgen.json",
        out / "metadata.json",
    ]
    present = [p for p in owned if p.exists()]
    folder = out / name
    if folder.exists() and not _ours(folder):
        raise Conflict(
            f"{folder} exists and was not written by envreg envgen",
            "choose another --out (or --name): envgen never writes into a folder it did not make",
        )
    if present and not force:
        raise Conflict(
            f"{out} already holds a run ({', '.join(p.name for p in present)})",
            "pass --force to replace that run's files, or choose another --out",
        )
    for path in present:
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()
    out.mkdir(parents=True, exist_ok=True)


def _ours(folder: Path) -> bool:
    try:
        return json.loads((folder / FOREIGN_MARKER).read_text()).get("kind") == MARKER["kind"]
    except (OSError, ValueError, AttributeError):
        return False


def _dump(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")


# --------------------------------------------------------------------------------------- the model
def prompt_spec(spec: Spec) -> dict[str, Any]:
    """The metadata as the model is shown it."""
    return {
        "name": spec.name,
        "class_name": spec.class_name,
        "domain": spec.domain,
        "description": spec.description,
        "tools": [t.model_dump(exclude_none=True) for t in spec.tools],
    }


async def write_metadata(llm: LLMConfig, brief: Brief, *, domain: str | None = None) -> Spec:
    """Ask the model for the metadata of the environment a brief describes (validated like a metadata file)."""

    def check(value: Any) -> None:
        from_metadata(value if isinstance(value, dict) else {}, name=brief.name, domain=domain)

    answer = await chat_json(llm, METADATA_SYSTEM, metadata_prompt(brief.text, brief.name), check=check)
    if answer is None:
        raise SpecProblem(
            f"the model wrote no usable metadata for the brief after {llm.attempts} attempts",
            "check the model's answers (it must answer JSON), or write the metadata yourself",
        )
    spec = from_metadata(answer, name=brief.name, domain=domain)
    return spec.model_copy(update={"source": "brief"})


# ---------------------------------------------------------------------------------------- the loop
async def generate(spec: Spec, llm: LLMConfig, options: Options, listener: Listener | None = None) -> Result:
    """Write, execute and revise the environment `spec` describes until a revision passes or the budget is spent."""
    say = listener or (lambda line: None)
    out = options.out
    result = Result(spec, [])
    previous: Draft | None = None
    report: list[dict[str, Any]] | None = None
    async with AsyncExitStack() as stack:
        checkers: dict[str, Any] = {}

        async def validators() -> tuple[Any, Any]:
            """One runtime and one TypeScript worker for every revision's validation, started on first use."""
            if not checkers:
                from envreg.runtime import Runtime
                from envreg.validate.ts import SchemaWorker

                checkers["runtime"] = await stack.enter_async_context(Runtime())
                checkers["worker"] = await stack.enter_async_context(SchemaWorker())
            return checkers["runtime"], checkers["worker"]

        for number in range(1, options.revisions + 1):
            revision = Revision(number)
            result.revisions.append(revision)
            started = time.perf_counter()
            rev_dir = out / "revisions" / f"{number:02d}"
            say(f"revision {number}/{options.revisions}: asking {llm.model} for the files")
            t = time.perf_counter()
            prompt = write_prompt(
                prompt_spec(spec), number, options.revisions, previous and previous.to_json(), report
            )
            answer = await chat_json(llm, WRITE_SYSTEM, prompt, check=Draft.parse)
            revision.seconds["llm"] = time.perf_counter() - t
            if answer is None:
                revision.failures.append(
                    Failure(
                        stage="reply",
                        check="envgen.reply",
                        message=f"no usable answer after {llm.attempts} attempts: answer with the JSON object "
                        '{"files": {...}, "notes": "..."}',
                    )
                )
            else:
                draft = Draft.parse(answer)
                revision.notes = draft.notes
                write_files(rev_dir / "draft", draft.folder_files())  # marked: never imported on the host
                await _execute(spec, draft, revision, rev_dir, options, validators, say)
                previous = draft
            revision.seconds["total"] = time.perf_counter() - started
            _dump(rev_dir / "report.json", revision.to_json())
            say(
                f"revision {number}: "
                + (
                    "passed"
                    if revision.passed
                    else f"{len(revision.failures)} failures ({', '.join(revision.failed_checks)})"
                )
                + f" in {revision.seconds['total']:.1f} s"
            )
            if revision.passed:
                break
            report = for_model(revision.failures)
    result.llm = llm.stats.as_dict()
    final = result.final
    if final is not None:
        source = out / "revisions" / f"{final.number:02d}"
        shutil.copytree(source / spec.name, out / spec.name)
        manifest = source / "manifests" / f"{spec.name}.json"
        if manifest.is_file():
            (out / "manifests").mkdir(parents=True, exist_ok=True)
            shutil.copy2(manifest, out / "manifests" / f"{spec.name}.json")
        result.folder = out / spec.name
    _dump(out / "envgen.json", result.to_json())
    return result


async def _execute(
    spec: Spec,
    draft: Draft,
    revision: Revision,
    rev_dir: Path,
    options: Options,
    validators: Callable[[], Any],
    say: Listener,
) -> None:
    """Inspect the draft in a sandbox; unless it does not import or hangs, build it and validate the image."""
    from envreg.sandboxing import SandboxFailed, SandboxTimeout, run_isolated

    name = spec.name
    say(f"revision {revision.number}: importing it and recording its scenarios in a container sandbox")
    t = time.perf_counter()
    try:
        inspection = await anyio.to_thread.run_sync(
            lambda: run_isolated(
                "envreg.envgen.inspect:inspect_draft",
                {"folder": name, "call_timeout": options.call_timeout},
                files={f"{name}/{rel}": data for rel, data in draft.folder_files().items()},
                timeout=options.sandbox_timeout,
                what=f"revision {revision.number} of {name}",
            )
        )
    except SandboxTimeout as exc:
        inspection = {
            "imported": False,
            "hung": True,
            "failures": [_stage_failure("envgen.hang", exc.message)],
        }
    except SandboxFailed as exc:
        inspection = {
            "imported": False,
            "hung": False,
            "failures": [_stage_failure("envgen.import", exc.message)],
        }
    revision.seconds["inspect"] = time.perf_counter() - t
    try:
        inspected = Inspection.read(inspection, set(draft.scenarios))
    except ValueError as exc:
        message = f"the sandbox's answer is not an inspection (did the module change envreg?): {exc}"
        revision.failures.append(Failure.model_validate(_stage_failure("envgen.import", message[:2000])))
        return
    revision.failures += [Failure.model_validate(f) for f in inspected.failures]
    if not inspected.imported:
        return
    if inspected.name != name:
        revision.failures.append(
            Failure(
                stage="inspect",
                check="envgen.metadata",
                message=f"the environment is named {inspected.name!r}: name it {name!r} "
                f'(Environment("{name}", ...))',
            )
        )
        return
    revision.failures += metadata_failures(spec, inspected.tools)
    if inspected.hung:
        return
    recorded = {rel: text.encode() for rel, text in inspected.recorded.items()}
    write_files(rev_dir / name, draft.folder_files(recorded))
    say(f"revision {revision.number}: building its image")
    t = time.perf_counter()
    try:
        built = await anyio.to_thread.run_sync(
            lambda: build_image(rev_dir, rev_dir / "manifests", name, timeout=options.build_timeout)
        )
    except BuildFailed as exc:
        revision.seconds["build"] = time.perf_counter() - t
        revision.failures.append(Failure(stage="build", check="envgen.build", message=exc.message))
        return
    revision.seconds["build"] = time.perf_counter() - t
    revision.built, revision.image_id, revision.manifest_digest = True, built.image_id, built.manifest_digest
    say(f"revision {revision.number}: validating {built.tag} ({built.image_id.removeprefix('sha256:')[:12]})")
    t = time.perf_counter()
    from envreg.validate import validate

    runtime, worker = await validators()
    try:
        with anyio.fail_after(options.validate_timeout):
            [checked] = await validate([f"{name}@{built.image_id}"], runtime=runtime, worker=worker)
    except TimeoutError:
        revision.failures.append(
            Failure(
                stage="validate",
                check="validate",
                message=f"envreg validate did not finish within {options.validate_timeout:.0f} s",
            )
        )
    except EnvregError as exc:
        revision.failures.append(Failure(stage="validate", check="validate", message=str(exc)))
    else:
        revision.validated = True
        revision.failures += from_validation(checked)
        _dump(rev_dir / "validate.json", checked.to_json())
    revision.seconds["validate"] = time.perf_counter() - t


def _stage_failure(check: str, message: str) -> dict[str, Any]:
    return {"stage": "inspect", "check": check, "message": message}
