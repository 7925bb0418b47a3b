"""Registry integration: a real CNCF Distribution server (`docker-registry serve`) on 127.0.0.1, the engine.

Every image these tests push, pull, save or load is a tiny derived image (`FROM envreg/<env>:1.0.0` plus a
test label, so it has an image ID of its own) tagged under a test-only prefix; the shared `envreg/*` images
are only read.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
import uuid
from pathlib import Path

import httpx2
import pytest

from envreg.config import image_prefix
from envreg.http.client import request as http_request

pytestmark = pytest.mark.docker

PREFIX = f"envregtest{uuid.uuid4().hex[:6]}/"
# the images `envreg build` made for the whole run (the tests here switch ENVREG_IMAGE_PREFIX to PREFIX)
SHARED = image_prefix()
TOKEN = "t-" + uuid.uuid4().hex[:8]
ENVREG = [sys.executable, "-m", "envreg.cli.main"]
ZERO = "sha256:" + "0" * 64


def _engine_ok() -> bool:
    if not shutil.which("docker"):
        return False
    return subprocess.run(["docker", "info"], capture_output=True).returncode == 0


@pytest.fixture(scope="module")
def engine():
    if not _engine_ok():
        root = Path(__file__).resolve().parent.parent
        subprocess.run([str(root / "scripts/setup-docker")], check=False, timeout=900)
    if not _engine_ok():
        pytest.skip("the Docker engine is not running (scripts/setup-docker)")
    from envreg.registry.testing import registry_binary

    if not registry_binary():
        pytest.skip("docker-registry is not installed (apt-get install -y docker-registry)")
    import docker

    client = docker.from_env()
    for env in ("calendar", "airline"):
        try:
            client.images.get(f"{SHARED}{env}:1.0.0")
        except docker.errors.ImageNotFound:
            pytest.skip(f"{SHARED}{env}:1.0.0 is not built (envreg build)")
    return client


@pytest.fixture(autouse=True)
def prefix(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("ENVREG_IMAGE_PREFIX", PREFIX)
    monkeypatch.delenv("ENVREG_REGISTRY", raising=False)
    return PREFIX


@pytest.fixture
def registry(engine, tmp_path: Path):
    from envreg.registry.testing import LocalRegistry

    with LocalRegistry(tmp_path / "registry") as reg:
        yield reg


@pytest.fixture
def derived(engine):
    """`derived("calendar", **labels)` -> image ID of `FROM envreg/calendar:1.0.0` + a unique label."""
    made: list[str] = []

    def make(env: str, tag: str | None = None, **labels: str) -> str:
        labels = {"io.envreg.test": uuid.uuid4().hex, **labels}
        dockerfile = f"FROM {SHARED}{env}:1.0.0\n" + "".join(f'LABEL {k}="{v}"\n' for k, v in labels.items())
        image, _ = engine.images.build(
            fileobj=io.BytesIO(dockerfile.encode()), tag=tag or f"{PREFIX}{env}:1.0.0", rm=True, forcerm=True
        )
        made.append(image.id)
        return image.id

    yield make
    for image_id in made:
        _remove(engine, image_id)


def _remove(client, image_id: str) -> None:
    import docker

    try:
        info = client.api.inspect_image(image_id)
    except docker.errors.ImageNotFound:
        return
    for ref in [*(info.get("RepoTags") or []), *(info.get("RepoDigests") or [])]:
        if ref.startswith(SHARED):
            continue  # never touch the shared images
        with contextlib.suppress(docker.errors.APIError):
            client.api.remove_image(ref)
    # Another process's runtime may briefly run any labelled environment image: wait for it to let go.
    deadline = time.monotonic() + 60
    while True:
        try:
            client.api.remove_image(image_id, force=True)
            return
        except docker.errors.ImageNotFound:
            return
        except docker.errors.APIError as exc:
            if "being used" not in str(exc) or time.monotonic() > deadline:
                return
            time.sleep(1)


def _present(image_id: str) -> bool:
    from envreg.registry import engine

    return engine.image_info(image_id) is not None


def _cli(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [*ENVREG, *args], capture_output=True, text=True, env=os.environ.copy(), timeout=600
    )
    if check and proc.returncode:
        raise AssertionError(
            f"envreg {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
        )
    return proc


def _engine_push(client, image_id: str, remote_repo: str, tag: str) -> str:
    """Push an image under any tag with the engine alone (what a careless or hostile publisher does)."""
    client.api.tag(image_id, remote_repo, tag, force=True)
    digest = None
    for ev in client.api.push(remote_repo, tag=tag, stream=True, decode=True):
        assert "error" not in ev, ev
        digest = (ev.get("aux") or {}).get("Digest") or digest
    client.api.remove_image(f"{remote_repo}:{tag}")
    assert digest
    return digest


@pytest.fixture
def containers(engine):
    started = []

    def run(image: str) -> tuple[int, int]:
        c = engine.containers.run(
            image,
            detach=True,
            ports={"8000/tcp": ("127.0.0.1", None), "8001/tcp": ("127.0.0.1", None)},
            environment={"ENVREG_TOKEN": TOKEN},
            labels={"envreg.test": "registry"},
            read_only=True,
            tmpfs={"/tmp": "size=16m"},
        )
        started.append(c)
        c.reload()
        ports = c.attrs["NetworkSettings"]["Ports"]
        agent, control = int(ports["8000/tcp"][0]["HostPort"]), int(ports["8001/tcp"][0]["HostPort"])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                r = http_request(
                    "GET", f"http://127.0.0.1:{control}/healthz", headers={"authorization": f"Bearer {TOKEN}"}
                )
                if r.status_code == 200:
                    break
            except httpx2.HTTPError:
                pass
            time.sleep(0.1)
        else:
            raise AssertionError(f"container did not come up:\n{c.logs().decode()[-2000:]}")
        return agent, control

    yield run
    for c in started:
        c.remove(force=True)


async def _call_tool(agent_port: int, tool: str, arguments: dict) -> tuple[bool, str, list[str]]:
    from mcp import Client

    async with Client(f"http://127.0.0.1:{agent_port}/mcp") as client:
        names = [t.name for t in (await client.list_tools()).tools]
        result = await client.call_tool(tool, arguments)
        return bool(result.is_error), result.content[0].text, names


# ---------------------------------------------------------------------------------------------------------------


def test_recording_an_image_gives_it_its_environment_tag(derived, engine) -> None:
    """An environment image known by another tag only gets `<prefix><name>:<version>` when it is recorded:
    the tag the record names and the runtime runs."""
    from envreg.registry import index

    image_id = derived("calendar", tag=f"{PREFIX}renamed:1")
    assert f"{PREFIX}calendar:1.0.0" not in engine.images.get(image_id).tags
    record = index.record_image(image_id, "built")
    assert record.local_ref == f"{PREFIX}calendar:1.0.0"
    assert record.local_ref in engine.images.get(image_id).tags
    assert index.resolve("calendar:1.0.0").image_id == image_id


@pytest.mark.anyio
async def test_build_push_remove_pull_by_digest_run(registry, derived, containers, engine) -> None:
    from envreg.registry import index, transfer

    image_id = derived("calendar")
    built = index.record_image(f"{PREFIX}calendar:1.0.0", "built")
    assert (
        built.image_id == image_id
        and built.source == "built"
        and built.local_ref == f"{PREFIX}calendar:1.0.0"
    )
    assert (
        built.manifest_digest
        == json.loads(Path("manifests/calendar.json").read_text())["digests"]["manifest"]
    )

    pushed = json.loads(_cli("push", "calendar:1.0.0", "--registry", registry.address, "--json").stdout)
    assert pushed["image_id"] == image_id and pushed["digest"].startswith("sha256:")
    assert index.resolve("calendar").repo_digest == f"{registry.address}/envreg/calendar@{pushed['digest']}"

    # remove locally: index record, tag and (unique) image
    _cli("rm", "calendar")
    _remove(engine, image_id)
    assert not _present(image_id)
    with pytest.raises(LookupError, match="calendar"):
        index.resolve("calendar")

    proc = _cli("pull", f"calendar@{pushed['digest']}", "--registry", registry.address)
    assert "pulled calendar:1.0.0" in proc.stdout, proc.stdout
    rec = index.resolve(f"calendar@{image_id}")
    assert (rec.image_id, rec.source, rec.manifest_digest) == (image_id, "pulled", built.manifest_digest)
    assert _present(image_id)
    # the pulled image keeps the registry's name; the shared local tag is not touched unless asked
    registry_name = f"{registry.address}/envreg/calendar:1.0.0"
    assert rec.local_ref == registry_name and f"as {registry_name}" in " ".join(proc.stdout.split())
    tags = engine.api.inspect_image(image_id)["RepoTags"]
    assert registry_name in tags and f"{PREFIX}calendar:1.0.0" not in tags

    # pulling again transfers nothing (no blob GET at the registry)
    mark = registry.log_mark()
    again = transfer.pull("calendar:1.0.0", registry.address)
    assert not again.transferred and again.record.image_id == image_id
    assert not [r for r in registry.requests_since(mark) if "/blobs/" in r[1]]

    agent, _ = containers(rec.image)
    is_error, text, tools = await _call_tool(agent, "list_calendars", {})
    assert not is_error, text
    assert "cal_" in text and "list_calendars" in tools

    # --tag: asked for, the shared tag names the pulled image too
    proc = _cli("pull", "calendar:1.0.0", "--registry", registry.address, "--tag")
    assert f"{PREFIX}calendar:1.0.0" in engine.api.inspect_image(image_id)["RepoTags"]
    assert index.resolve("calendar").local_ref == f"{PREFIX}calendar:1.0.0"


def _with_edited_code(client, base: str, tag: str) -> str:
    """An image `FROM base` whose /env/env.py is edited; labels and /env/manifest.json stay as they are."""
    source = Path("images/calendar/env.py").read_text()
    edited = source.replace("def list_calendars(", "def list_calendars(  # patched\n", 1).encode()
    assert edited != source.encode()
    dockerfile = f"FROM {base}\nCOPY env.py /env/env.py\n".encode()
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as tar:
        for name, data in (("Dockerfile", dockerfile), ("env.py", edited)):
            member = tarfile.TarInfo(name)
            member.size = len(data)
            tar.addfile(member, io.BytesIO(data))
    context.seek(0)
    image, _ = client.images.build(fileobj=context, custom_context=True, tag=tag, rm=True, forcerm=True)
    return image.id


@pytest.mark.anyio
async def test_edited_environment_code_is_refused_by_pull_and_by_the_runtime(
    registry, derived, engine
) -> None:
    from envreg.registry import VerificationError, index, transfer
    from envreg.runtime import Runtime

    good = derived("calendar")
    index.record_image(good, "built")
    transfer.push("calendar", registry.address)
    before = [r.to_json() for r in index.list_records()]

    tampered = _with_edited_code(engine, good, f"{PREFIX}tampered-code:1")
    try:
        labels = engine.api.inspect_image(tampered)["Config"]["Labels"]
        assert labels == engine.api.inspect_image(good)["Config"]["Labels"], "labels unchanged"

        # the runtime refuses to start it, without running it
        async with Runtime() as rt:
            with pytest.raises(VerificationError, match=r"/env/env.py was changed") as info:
                await rt.sandbox(f"{PREFIX}tampered-code:1", isolation="container")
            assert "altered after it was built" in str(info.value)
        assert not engine.containers.list(all=True, filters={"ancestor": tampered})

        # published under the environment's own tag: `envreg pull --replace` refuses it and removes it
        _engine_push(engine, tampered, f"{registry.address}/envreg/calendar", "1.0.0")
    finally:
        _remove(engine, tampered)
    proc = _cli("pull", "calendar:1.0.0", "--registry", registry.address, "--replace", check=False)
    assert proc.returncode == 1, proc.stdout
    assert "error:" in proc.stderr and "/env/env.py was changed" in proc.stderr, proc.stderr
    assert "hint:" in proc.stderr
    assert [r.to_json() for r in index.list_records()] == before
    assert not _present(tampered), "a refused pull must not leave the image behind"


def test_moved_tag_and_altered_manifest_label_are_refused(registry, derived, engine) -> None:
    from envreg.registry import VerificationError, index, transfer

    repo = f"{registry.address}/envreg/calendar"
    good = derived("calendar")
    index.record_image(good, "built")
    good_digest = transfer.push("calendar", registry.address).digest

    # 1. the image's manifest label was altered: the manifest inside no longer matches it
    bad = derived("calendar", tag=f"{PREFIX}tampered:1", **{"io.envreg.manifest.digest": ZERO})
    _engine_push(engine, bad, repo, "1.0.0")
    _remove(engine, bad)
    before = [r.to_json() for r in index.list_records()]
    proc = _cli("pull", "calendar:1.0.0", "--registry", registry.address, check=False)
    assert proc.returncode == 1 and "tag now points at another image" in proc.stderr, proc.stderr
    # even when replacing the recorded version on purpose, the altered image is refused
    proc = _cli("pull", "calendar:1.0.0", "--registry", registry.address, "--replace", check=False)
    assert proc.returncode == 1
    assert "error:" in proc.stderr and "does not match the manifest it carries" in proc.stderr, proc.stderr
    assert [r.to_json() for r in index.list_records()] == before
    assert not _present(bad), "a refused pull must not leave the image behind"

    # 2. the tag moved to another calendar image while this host pins the first one
    other = derived("calendar", tag=f"{PREFIX}other:1")
    _engine_push(engine, other, repo, "1.0.0")
    _remove(engine, other)
    with pytest.raises(VerificationError, match="tag now points at another image"):
        transfer.pull("calendar:1.0.0", registry.address)
    assert [r.to_json() for r in index.list_records()] == before
    assert not _present(other)

    # 3. the tag moved to another environment altogether (caught from registry metadata, before any transfer)
    airline = derived("airline")
    _engine_push(engine, airline, repo, "1.0.0")
    _remove(engine, airline)
    mark = registry.log_mark()
    proc = _cli("pull", "calendar:1.0.0", "--registry", registry.address, check=False)
    assert proc.returncode == 1 and "labelled airline:1.0.0, not calendar" in proc.stderr, proc.stderr
    assert len([r for r in registry.requests_since(mark) if "/blobs/" in r[1]]) <= 1  # its config, no layer
    assert [r.to_json() for r in index.list_records()] == before
    assert not _present(airline)

    # the pinned digest still pulls what was pushed
    assert transfer.pull(f"calendar@{good_digest}", registry.address).record.image_id == good


def test_search_by_tool_name_and_inspect(registry, derived, tmp_path: Path, monkeypatch) -> None:
    from envreg.registry import index, transfer

    derived("calendar")
    derived("airline")
    index.record_image(f"{PREFIX}calendar:1.0.0", "built")
    index.record_image(f"{PREFIX}airline:1.0.0", "built")
    transfer.push("calendar", registry.address)
    transfer.push("airline", registry.address)
    calendar_tools = [t["name"] for t in json.loads(Path("manifests/calendar.json").read_text())["tools"]]
    tool = "respond_to_invitation" if "respond_to_invitation" in calendar_tools else calendar_tools[-1]

    # an empty local index: the registry alone must answer, from metadata (nothing pulled)
    monkeypatch.setenv("ENVREG_HOME", str(tmp_path / "elsewhere"))
    hits = json.loads(_cli("search", tool, "--registry", registry.address, "--json").stdout)
    assert [(h["name"], h["where"]) for h in hits] == [("calendar", f"{registry.address}/envreg/calendar")]
    assert f"tool:{tool}" in hits[0]["matched"] and hits[0]["tools"] == calendar_tools
    assert index.list_records() == []

    table = _cli("search", "calendar", "--registry", registry.address).stdout
    assert "calendar" in table and "airline" not in table

    shown = _cli("inspect", "calendar", "--registry", registry.address).stdout
    assert all(t in shown for t in calendar_tools) and "state schema" in shown
    assert "limits: state 8,388,608 bytes, arguments 262,144 bytes per call" in shown, shown

    # locally, after a pull
    transfer.pull("calendar", registry.address)
    shown = _cli("inspect", "calendar").stdout
    assert all(t in shown for t in calendar_tools)
    data = json.loads(_cli("inspect", "calendar", "--json").stdout)
    assert [t["name"] for t in data["manifest"]["tools"]] == calendar_tools
    assert data["manifest"]["state_schema"]["type"] == "object" and data["source"] == "pulled"
    assert "calendar" in _cli("ls").stdout


@pytest.mark.anyio
async def test_save_wipe_load_run_and_damaged_archives(derived, containers, engine, tmp_path: Path) -> None:
    from envreg.registry import index

    cal, air = derived("calendar"), derived("airline")
    index.record_image(cal, "built")
    index.record_image(air, "built")
    archive = tmp_path / "suite.tar"
    proc = _cli("save", "calendar", "airline", "-o", str(archive))
    assert "saved" in proc.stdout and archive.stat().st_size > 1_000_000

    # wipe: the index records and the (test-only) images
    _cli("rm", "calendar", "airline")
    _remove(engine, cal)
    _remove(engine, air)
    assert not _present(cal) and not _present(air) and index.list_records() == []

    # damaged archives are refused before anything is loaded
    truncated = tmp_path / "truncated.tar"
    with archive.open("rb") as src:
        truncated.write_bytes(src.read(archive.stat().st_size // 2))
    proc = _cli("load", str(truncated), check=False)
    assert proc.returncode == 1 and "truncated" in proc.stderr and "nothing was loaded" in proc.stderr, (
        proc.stderr
    )
    altered = tmp_path / "altered.tar"
    shutil.copy(archive, altered)
    with altered.open("r+b") as f:
        f.seek(archive.stat().st_size // 2)
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 0xFF]))
    proc = _cli("load", str(altered), check=False)
    assert proc.returncode == 1 and "does not match its recorded sha256" in proc.stderr, proc.stderr
    assert index.list_records() == [] and not _present(cal) and not _present(air)

    loaded = json.loads(_cli("load", str(archive), "--json").stdout)
    assert {(r["name"], r["image_id"], r["source"]) for r in loaded} == {
        ("calendar", cal, "loaded"),
        ("airline", air, "loaded"),
    }
    rec = index.resolve("calendar")
    assert rec.image_id == cal and _present(air)
    assert engine.images.get(cal).tags == [], "load moved a shared tag (as pull, only with --tag)"
    _cli("load", str(archive), "--tag")
    assert engine.images.get(cal).tags == [f"{PREFIX}calendar:1.0.0"]
    agent, _ = containers(rec.image)
    is_error, text, _tools = await _call_tool(agent, "list_calendars", {})
    assert not is_error, text


def test_lock_then_pull_locked_on_a_clean_state(
    registry, derived, engine, tmp_path: Path, monkeypatch
) -> None:
    from envreg.registry import index, transfer
    from envreg.registry.lockfile import Lockfile

    cal, air = derived("calendar"), derived("airline")
    index.record_image(cal, "built")
    index.record_image(air, "built")
    transfer.push("calendar", registry.address)
    transfer.push("airline", registry.address)
    lockfile = tmp_path / "envreg.lock"
    _cli("lock", "calendar", "airline", "--registry", registry.address, "-o", str(lockfile))
    locked = Lockfile.read(lockfile)
    assert {(e.name, e.image_id) for e in locked.environments} == {("calendar", cal), ("airline", air)}
    assert locked == Lockfile.read(lockfile)
    from_index = tmp_path / "from-index.lock"
    _cli("lock", "calendar", "airline", "-o", str(from_index))
    assert Lockfile.read(from_index).to_json() == locked.to_json()

    # clean state: a new ENVREG_HOME and none of the images
    monkeypatch.setenv("ENVREG_HOME", str(tmp_path / "clean-home"))
    _remove(engine, cal)
    _remove(engine, air)
    # the tag moves afterwards: --locked must not care (it pulls by digest)
    moved = derived("calendar", tag=f"{PREFIX}moved:1")
    _engine_push(engine, moved, f"{registry.address}/envreg/calendar", "1.0.0")
    _remove(engine, moved)

    _cli("pull", "--locked", "--lockfile", str(lockfile))
    got = {r.name: (r.image_id, r.manifest_digest) for r in index.list_records()}
    assert got == {e.name: (e.image_id, e.manifest_digest) for e in locked.environments}
    assert _present(cal) and _present(air) and not _present(moved)

    # a lockfile whose pin the registry does not serve is refused, and nothing changes
    bad = json.loads(lockfile.read_text())
    bad["environments"][0]["image_id"] = ZERO
    lockfile.write_text(json.dumps(bad))
    before = [r.to_json() for r in index.list_records()]
    proc = _cli("pull", "--locked", "--lockfile", str(lockfile), check=False)
    assert proc.returncode == 1 and "is not the locked" in proc.stderr, proc.stderr
    assert [r.to_json() for r in index.list_records()] == before


def test_basic_auth_registry(engine, derived, tmp_path: Path, monkeypatch) -> None:
    from envreg.registry import AuthError, index, transfer
    from envreg.registry.search import search
    from envreg.registry.testing import LocalRegistry

    with LocalRegistry(tmp_path / "auth-registry", users={"alice": "s3cret"}) as reg:
        derived("calendar")
        index.record_image(f"{PREFIX}calendar:1.0.0", "built")
        monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "no-docker-config"))
        with pytest.raises(AuthError, match="refused access anonymously"):
            search("calendar", reg.address)
        monkeypatch.setenv("ENVREG_REGISTRY_USERNAME", "alice")
        monkeypatch.setenv("ENVREG_REGISTRY_PASSWORD", "wrong")
        with pytest.raises(AuthError, match="refused access as 'alice'"):
            search("calendar", reg.address)
        monkeypatch.setenv("ENVREG_REGISTRY_PASSWORD", "s3cret")
        pushed = transfer.push("calendar", reg.address)
        hits = search("calendar", reg.address)
        assert {h.where for h in hits if h.name == "calendar"} == {"local", f"{reg.address}/envreg/calendar"}

        # the same credentials from the Docker credential store (config.json auths)
        import base64

        monkeypatch.delenv("ENVREG_REGISTRY_USERNAME")
        monkeypatch.delenv("ENVREG_REGISTRY_PASSWORD")
        cfg = tmp_path / "docker-config"
        cfg.mkdir()
        auth = base64.b64encode(b"alice:s3cret").decode()
        (cfg / "config.json").write_text(json.dumps({"auths": {reg.address: {"auth": auth}}}))
        monkeypatch.setenv("DOCKER_CONFIG", str(cfg))
        monkeypatch.setenv("ENVREG_HOME", str(tmp_path / "other-home"))
        proc = _cli("pull", f"calendar@{pushed.digest}", "--registry", reg.address)
        assert "calendar:1.0.0" in proc.stdout
