"""Run untrusted Python (foreign tool files, generated environment modules) in a container sandbox; get JSON back.

`run_isolated(function, payload, files=...)` starts one container of the base image that `envreg build`
makes, with the runtime's hardening (uid 65534, read-only root, a small `/tmp`, every capability
dropped, no new privileges, pids / memory / CPU limits) and **no network at all** (`network_mode=none`).
The request goes in on stdin: the files (written under ``/tmp/work``), the payload, and this envreg's
own source (a zip put first on ``sys.path``), so the code that inspects the files is the host's, whatever
envreg the image was built with. Inside, ``function`` (``"package.module:callable"``, envreg's own code)
is called as ``callable(Path("/tmp/work"), payload)`` and what it returns (JSON data) comes back; what
the foreign code prints goes to the container's stderr, never into the answer. A call that raises
comes back as `SandboxFailed` with the exception's type and message; a call past `timeout` is killed
(`SandboxTimeout`); either way the container is removed.

Inside the sandbox ``ENVREG_FOREIGN_CODE=allow`` is set: `envreg.env.loader` imports foreign
environment folders only where it is (sandboxes and environment images), never on the host.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import secrets
import socket
import sys
import time
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from envreg.errors import EnvregError, ImageNotFound
from envreg.protocol import ENV_FOREIGN_CODE, EXPIRES_LABEL, MANAGED_LABEL

__all__ = ["SandboxFailed", "SandboxLimits", "SandboxTimeout", "run_isolated"]
WORKDIR = "/tmp/work"
# reads the request, puts envreg's zip first on sys.path, hands over to `_serve` from that envreg
_BOOTSTRAP = (
    "import base64,json,sys;r=json.loads(sys.stdin.buffer.read());"
    "open('/tmp/envreg.zip','wb').write(base64.b64decode(r.pop('envreg')));"
    "sys.path.insert(0,'/tmp/envreg.zip');import envreg.sandboxing as s;s._serve(r)"
)


class SandboxFailed(EnvregError):
    """The code in the sandbox raised, or the sandbox ended without an answer; the message says what it said."""

    status = 422


class SandboxTimeout(SandboxFailed):
    """The code in the sandbox ran past its time limit and was killed."""

    status = 504


@dataclass(frozen=True)
class SandboxLimits:
    memory: str = "512m"
    cpus: float = 1.0
    pids: int = 64
    tmpfs: str = "size=64m,mode=1777"


@cache
def _envreg_zip() -> bytes:
    """This envreg's Python source as a zip (no bytecode, no tests): what runs inside the sandbox."""
    root = Path(__file__).resolve().parent
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(root.rglob("*.py")):
            zf.writestr(
                zipfile.ZipInfo(f"envreg/{path.relative_to(root)}", (1980, 1, 1, 0, 0, 0)), path.read_bytes()
            )
    return buffer.getvalue()


def default_image() -> str:
    """The base image of this checkout's envreg version, under the configured prefix (`envreg build` makes it)."""
    from envreg.images.bake import base_tag, envreg_version
    from envreg.images.paths import repo_root

    try:
        version = envreg_version(repo_root())
    except (OSError, KeyError):
        from importlib.metadata import version as installed

        version = installed("envreg")
    return base_tag(version)


def run_isolated(
    function: str,
    payload: Any = None,
    *,
    files: Mapping[str, bytes] | None = None,
    image: str | None = None,
    timeout: float = 120.0,
    limits: SandboxLimits | None = None,
    what: str = "foreign code",
) -> Any:
    """Call envreg's ``function`` (``"module:callable"``) on `files` and `payload` in a fresh hardened
    container without network; return what it returns (JSON data).

    `files` maps relative paths to contents, written under ``/tmp/work`` (the callable's first argument);
    `what` names the code in error messages. Raises `SandboxTimeout` past `timeout` seconds,
    `SandboxFailed` when the callable raises (its type and message) or the container dies (its exit
    code and the end of its stderr), `ImageNotFound` without the base image, `EngineError` without an engine.
    """
    from envreg.docker_engine import docker_client, engine_errors

    limits = limits or SandboxLimits()
    image = image or default_image()
    for rel in files or {}:
        if Path(rel).is_absolute() or ".." in Path(rel).parts:
            raise ValueError(f"sandbox file {rel!r} must be a relative path inside the work folder")
    request = json.dumps(
        {
            "function": function,
            "payload": payload,
            "files": {rel: base64.b64encode(data).decode() for rel, data in (files or {}).items()},
            "envreg": base64.b64encode(_envreg_zip()).decode(),
        }
    ).encode()
    client = docker_client()
    name = f"envreg-sandbox-{secrets.token_hex(6)}"
    with engine_errors(f"starting a sandbox for {what} ({image})"):
        try:
            client.images.get(image)
        except Exception as exc:
            if type(exc).__name__ == "ImageNotFound":
                raise ImageNotFound(
                    f"the sandbox image {image} is missing",
                    "build it: `envreg build` (any environment builds the base)",
                ) from None
            raise
        container = client.containers.create(
            image,
            entrypoint=["python3", "-I", "-c", _BOOTSTRAP],
            command=[],
            name=name,
            labels={MANAGED_LABEL: "true", EXPIRES_LABEL: str(int(time.time() + timeout + 60))},
            environment={ENV_FOREIGN_CODE: "allow", "PYTHONDONTWRITEBYTECODE": "1", "HOME": "/tmp"},
            stdin_open=True,
            detach=False,  # with stdin_open: StdinOnce, so our half-close is the code's end of input
            network_mode="none",
            user="65534:65534",
            read_only=True,
            tmpfs={"/tmp": limits.tmpfs},
            cap_drop=["ALL"],
            security_opt=["no-new-privileges:true"],
            pids_limit=limits.pids,
            mem_limit=limits.memory,
            nano_cpus=int(limits.cpus * 1e9),
            working_dir="/tmp",
        )
    try:
        attached = client.api.attach_socket(container.id, params={"stdin": 1, "stream": 1})
        raw = getattr(attached, "_sock", attached)
        container.start()
        raw.sendall(request)
        raw.shutdown(socket.SHUT_WR)
        started = time.monotonic()
        try:
            status = container.wait(timeout=timeout)
        except Exception:
            if time.monotonic() - started < timeout - 1:
                raise
            raise SandboxTimeout(
                f"{what} ran past {timeout:.0f} s in its sandbox and was stopped",
                "make it faster, or allow more time (a timeout option of the command)",
            ) from None
        finally:
            with contextlib.suppress(OSError):
                raw.close()
        stdout = container.logs(stdout=True, stderr=False).decode("utf-8", "replace")
        stderr = container.logs(stdout=False, stderr=True).decode("utf-8", "replace")
    finally:
        with contextlib.suppress(Exception):
            container.remove(force=True)
    return _answer(stdout, stderr, int(status.get("StatusCode", -1)), limits, what)


def _answer(stdout: str, stderr: str, code: int, limits: SandboxLimits, what: str) -> Any:
    line = stdout.strip().rsplit("\n", 1)[-1] if stdout.strip() else ""
    try:
        answer = json.loads(line) if line else None
    except json.JSONDecodeError:
        answer = None
    if isinstance(answer, dict) and answer.get("envreg_sandbox") == 1:
        if answer["ok"]:
            return answer["value"]
        raise SandboxFailed(f"{what} failed in its sandbox: {answer['type']}: {answer['error']}")
    tail = "\n".join(stderr.strip().splitlines()[-8:])
    if code == 137:
        reason = f"was killed (out of its {limits.memory} of memory?)"
    else:
        reason = f"ended with exit code {code} and no answer"
    raise SandboxFailed(
        f"{what} {reason} in its sandbox" + (f":\n{tail}" if tail else ""),
        "see the message; an image without envreg's dependencies needs a rebuild (`envreg build`)",
    )


def _serve(request: dict[str, Any]) -> None:
    """Inside the sandbox: write the files, call the function, print the one-line JSON answer."""
    import importlib
    import traceback

    answer_fd = os.dup(1)
    os.dup2(2, 1)  # whatever the code prints goes to stderr; the answer has stdout to itself
    sys.stdout = sys.stderr
    work = Path(WORKDIR)
    try:
        for rel, data in request["files"].items():
            path = work / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(base64.b64decode(data))
        work.mkdir(parents=True, exist_ok=True)
        module, _, name = request["function"].partition(":")
        value = getattr(importlib.import_module(module), name)(work, request.get("payload"))
        answer = {"envreg_sandbox": 1, "ok": True, "value": value}
        text = json.dumps(answer, ensure_ascii=False)
    except BaseException as exc:  # everything comes back as an answer, a SystemExit too
        traceback.print_exc()
        text = json.dumps(
            {"envreg_sandbox": 1, "ok": False, "type": type(exc).__name__, "error": str(exc)[:4000]},
            ensure_ascii=False,
        )
    with os.fdopen(answer_fd, "w", encoding="utf-8") as out:
        out.write("\n" + text + "\n")


def facts(work: Path, payload: Any) -> dict[str, Any]:
    """What the code in a sandbox finds around itself (its user, the files it was given, whether the root is
    writable and whether any address answers): `run_isolated("envreg.sandboxing:facts")` checks a sandbox."""
    probes: dict[str, str] = {}
    for host, port in (payload or {}).get("connect", []):
        try:
            with socket.create_connection((host, port), timeout=2):
                probes[f"{host}:{port}"] = "connected"
        except OSError as exc:
            probes[f"{host}:{port}"] = f"refused: {exc}"
    try:
        Path("/envreg-probe").write_text("x")
        root_writable = True
    except OSError:
        root_writable = False
    return {
        "uid": os.getuid(),
        "gid": os.getgid(),
        "files": sorted(str(p.relative_to(work)) for p in work.rglob("*") if p.is_file()),
        "root_writable": root_writable,
        "connect": probes,
        "interfaces": sorted(n for _, n in socket.if_nameindex()),
        "python": sys.version.split()[0],
    }
