"""Environment images: the base lock, the wheel lock, the bake file and (with the engine) the built images."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx2
import pytest
from conftest import REFERENCE_ENVS, ROOT

from envreg.config import image_prefix
from envreg.http.client import request as http_request
from envreg.images import (
    BaseLock,
    EnvImage,
    LockedWheel,
    bake_vars,
    canonical_name,
    diff_packages,
    format_requirements_lock,
    parse_requirements_lock,
    server_requirements,
)

ENVREG = [sys.executable, "-m", "envreg.cli.main"]

# ----------------------------------------------------------------------------------------------------------------
# Pure logic (no engine)
# ----------------------------------------------------------------------------------------------------------------


def test_requirements_lock_roundtrip() -> None:
    wheels = [
        LockedWheel("uvloop", "0.23.0", ("a" * 64,), "sys_platform != 'win32'"),
        LockedWheel("mcp", "2.3.0", ("b" * 64, "c" * 64)),
    ]
    text = format_requirements_lock(wheels, "# header")
    assert parse_requirements_lock(text) == sorted(wheels, key=lambda w: w.name)
    with pytest.raises(ValueError, match="no --hash"):
        parse_requirements_lock("mcp==2.3.0\n")
    with pytest.raises(ValueError, match="cannot parse"):
        parse_requirements_lock("mcp>=2 --hash=sha256:" + "a" * 64 + "\n")


@pytest.mark.parametrize("adapter", ["bfcl", "tau2"])
@pytest.mark.parametrize(
    ("lock", "said"),
    [("{not a lock", "cannot parse"), ("mcp==2.3.0\n", "no --hash"), ("# only a comment\n", "pins nothing")],
)
def test_adapters_generate_refuses_a_bad_lock_before_writing(
    tmp_path: Path, adapter: str, lock: str, said: str
) -> None:
    from typer.testing import CliRunner

    from envreg.cli.main import app

    (tmp_path / "bad.lock").write_text(lock)
    images = tmp_path / "images"
    args = ["adapters", adapter, "generate", "--lock", str(tmp_path / "bad.lock"), "--images", str(images)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert said in result.output and "--hash=sha256" in result.output, result.output
    assert not images.exists(), "nothing is written"


def test_committed_requirements_lock_covers_the_server_dependencies() -> None:
    locked = {
        w.name: w for w in parse_requirements_lock((ROOT / "images/base/requirements.lock").read_text())
    }
    from packaging.requirements import Requirement
    from packaging.version import Version

    host = {
        canonical_name(m[1]): m[2]
        for m in re.finditer(r"^([A-Za-z0-9][\w.-]*)==(\S+)", (ROOT / "requirements.lock").read_text(), re.M)
    }
    for req in map(Requirement, server_requirements(ROOT / "pyproject.toml")):
        name = canonical_name(req.name)
        assert name in locked, req
        assert req.specifier.contains(Version(locked[name].version)), (
            f"{req}: the image lock has {locked[name].version}"
        )
        assert locked[name].version == host[name], f"{name}: the image lock and requirements.lock disagree"
    assert {"uvloop", "uvicorn", "mcp"} <= set(locked)
    assert "docker" not in locked and "fastapi" not in locked
    assert all(len(h) == 64 for w in locked.values() for h in w.hashes)


def test_committed_base_lock_is_consistent_and_bake_readable() -> None:
    text = (ROOT / "images/base/base.lock").read_text()
    lock = BaseLock.loads(text)
    assert lock.dumps() == text
    assert lock.image == f"envreg/base-rootfs:{lock.tar_sha256.removeprefix('sha256:')}"
    assert {"python3-minimal", "python3.11", "libc6"} <= set(lock.packages)
    assert json.loads(text)["variable"]["BASE_IMAGE"]["default"] == lock.image


def test_base_lock_diff_names_what_debian_moved() -> None:
    changes = diff_packages({"a": "1", "b": "2", "c": "3"}, {"a": "1", "b": "2+deb12u1", "d": "4"})
    assert changes == ["~ b 2 -> 2+deb12u1", "- c 3", "+ d 4"]


def test_bake_vars_carry_every_environment() -> None:
    lock = BaseLock(tar_sha256="sha256:" + "0" * 64, image_id="sha256:" + "1" * 64, size=1, packages={})
    envs = [EnvImage("calendar", "1.0.0", "Cal", "sha256:" + "2" * 64)]
    v = bake_vars(envs, lock=lock, epoch=86400, version="0.1.0", revision="abc", source="", stage=Path("/s"))[
        "variable"
    ]
    assert v["BASE_IMAGE"]["default"] == lock.image
    assert v["CREATED"]["default"] == "1970-01-02T00:00:00Z"
    assert v["ENVS"]["default"] == [
        {
            "name": "calendar",
            "version": "1.0.0",
            "description": "Cal",
            "manifest_digest": "sha256:" + "2" * 64,
        }
    ]


def test_the_image_prefix_names_every_tag_the_build_makes(monkeypatch: pytest.MonkeyPatch) -> None:
    """`ENVREG_IMAGE_PREFIX=team` (or `team/`) tags team/<name>:<version> and team/base:<version>."""
    from envreg.images import base_tag

    lock = BaseLock(tar_sha256="sha256:" + "0" * 64, image_id="sha256:" + "1" * 64, size=1, packages={})
    for value in ("team", "team/", " team/ "):
        monkeypatch.setenv("ENVREG_IMAGE_PREFIX", value)
        assert EnvImage("calendar", "1.0.0", "Cal", "sha256:" + "2" * 64).tag == "team/calendar:1.0.0"
        assert base_tag("0.1.0") == "team/base:0.1.0"
        v = bake_vars([], lock=lock, epoch=0, version="0.1.0", revision="", source="", stage=Path("/s"))
        assert v["variable"]["PREFIX"]["default"] == "team/"
    bake = (ROOT / "docker-bake.hcl").read_text()
    tags = [
        line for line in bake.splitlines() if "tags" in line or "BASE_IMAGE =" in line or ".title" in line
    ]
    assert tags and all("envreg/" not in line for line in tags), tags


def test_require_engine_names_the_setup_script(monkeypatch: pytest.MonkeyPatch) -> None:
    from envreg import docker_engine

    monkeypatch.setattr(docker_engine.shutil, "which", lambda _: None)
    with pytest.raises(docker_engine.EngineUnavailable, match="scripts/setup-docker"):
        docker_engine.require_engine()


# ----------------------------------------------------------------------------------------------------------------
# With the engine
# ----------------------------------------------------------------------------------------------------------------

TOKEN = "test-token-" + uuid.uuid4().hex[:8]


def _docker(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=check)


def _image_id(ref: str) -> str | None:
    proc = _docker("image", "inspect", "--format", "{{.Id}}", ref, check=False)
    return proc.stdout.strip() if proc.returncode == 0 else None


def _envreg_build(*args: str, env: dict | None = None, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [*ENVREG, "build", "--json", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=1200,
    )
    if check and proc.returncode:
        raise AssertionError(f"envreg build failed:\n{proc.stdout}\n{proc.stderr}")
    return proc


def _free_port_of(cid: str, port: int) -> int:
    out = _docker("port", cid, f"{port}/tcp").stdout.strip().splitlines()[0]
    return int(out.rsplit(":", 1)[1])


def _wait_http(url: str, timeout: float = 30, headers: dict | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            http_request("GET", url, headers=headers, timeout=1)
            return
        except httpx2.HTTPError:
            time.sleep(0.1)
    raise AssertionError(f"{url} did not answer within {timeout}s")


@pytest.fixture
def container(reference_images):
    started = []

    def start(name: str, *extra: str) -> str:
        proc = _docker(
            "run",
            "-d",
            "--read-only",
            "--tmpfs",
            "/tmp:size=16m",
            "-p",
            "127.0.0.1:0:8000",
            "-p",
            "127.0.0.1:0:8001",
            "-e",
            f"ENVREG_TOKEN={TOKEN}",
            "--label",
            "envreg.test=images",
            *extra,
            reference_images[name]["tag"],
        )
        cid = proc.stdout.strip()
        started.append(cid)
        return cid

    yield start
    for cid in started:
        _docker("rm", "-f", cid, check=False)


@pytest.mark.docker
def test_images_are_labelled_and_pinned(reference_images) -> None:
    assert set(REFERENCE_ENVS) | {"base"} <= set(reference_images)
    lock = BaseLock.loads((ROOT / "images/base/base.lock").read_text())
    assert _image_id(lock.image) == lock.image_id
    for name in REFERENCE_ENVS:
        row = reference_images[name]
        info = json.loads(_docker("image", "inspect", row["tag"]).stdout)[0]
        labels = info["Config"]["Labels"]
        manifest = json.loads((ROOT / "manifests" / f"{name}.json").read_text())
        assert labels["io.envreg.name"] == name
        assert labels["io.envreg.version"] == manifest["version"]
        assert (
            labels["io.envreg.manifest.digest"] == manifest["digests"]["manifest"] == row["manifest_digest"]
        )
        for key in ("title", "version", "description", "created", "source", "revision"):
            assert f"org.opencontainers.image.{key}" in labels
        assert info["Config"]["User"] == "65534:65534"
        assert info["Config"]["Entrypoint"][:4] == ["python3", "-m", "envreg.server", "/env"]
        assert {"8000/tcp", "8001/tcp"} <= set(info["Config"]["ExposedPorts"])
        shown = _docker("run", "--rm", "--entrypoint", "cat", row["tag"], "/env/manifest.json").stdout
        assert json.loads(shown) == manifest


@pytest.mark.docker
def test_images_ship_exactly_the_source_their_manifest_records(reference_images) -> None:
    import docker

    from envreg.registry.engine import verify_image_source

    client = docker.from_env()
    for name in REFERENCE_ENVS:
        tag = reference_images[name]["tag"]
        manifest = verify_image_source(client, tag)
        assert (
            manifest.source_files
            == json.loads((ROOT / "manifests" / f"{name}.json").read_text())["source_files"]
        )
        listed = _docker("run", "--rm", "--entrypoint", "find", tag, "/env", "-type", "f").stdout.split()
        assert sorted(listed) == sorted(
            [f"/env/{rel}" for rel in manifest.source_files] + ["/env/manifest.json"]
        )


@pytest.mark.docker
@pytest.mark.anyio
@pytest.mark.parametrize("name", REFERENCE_ENVS)
async def test_container_serves_the_manifest_tools_and_passes_scenarios(name, container) -> None:
    from mcp import Client

    from envreg.env import load_environment, load_scenarios, states_equal
    from envreg.env.scenario import CallOutcome, run_steps

    cid = container(name)
    port, cport = _free_port_of(cid, 8000), _free_port_of(cid, 8001)
    auth = {"authorization": f"Bearer {TOKEN}"}
    _wait_http(f"http://127.0.0.1:{cport}/healthz", headers=auth)
    manifest = json.loads((ROOT / "manifests" / f"{name}.json").read_text())
    env = load_environment(name)
    scenarios, _ = load_scenarios(env.folder)
    control = f"http://127.0.0.1:{cport}/instances/default"
    async with (
        httpx2.AsyncClient(headers=auth, timeout=30) as http,
        Client(f"http://127.0.0.1:{port}/mcp") as client,
    ):
        tools = (await client.list_tools()).tools
        assert [t.name for t in tools] == [t["name"] for t in manifest["tools"]]

        async def call(tool: str, arguments: dict) -> CallOutcome:
            result = await client.call_tool(tool, arguments)
            return CallOutcome(is_error=bool(result.is_error), text=result.content[0].text)

        called = set()
        for scenario in scenarios:
            if scenario.initial_state is None:
                r = await http.post(f"{control}/reset")
            else:
                r = await http.put(f"{control}/state", json=scenario.initial_state)
            assert r.status_code == 200, r.text
            assert await run_steps(scenario, call) == [], scenario.name
            called |= {s.tool for s in scenario.steps}
            if scenario.final_state is not None:
                state = (await http.get(f"{control}/state")).json()["state"]
                assert states_equal(state, scenario.final_state, env.volatile), scenario.name
        assert called == {t.name for t in tools}


@pytest.mark.docker
def test_container_is_unprivileged_read_only_and_offline(container) -> None:
    cid = container("calendar", "--network", "none")
    for _ in range(100):
        if _docker("exec", cid, "true", check=False).returncode == 0:
            break
        time.sleep(0.1)
    assert _docker("exec", cid, "id", "-u").stdout.strip() == "65534"
    status = _docker("exec", cid, "cat", "/proc/1/status").stdout  # pid 1 is the environment server
    uids = next(line.split()[1:] for line in status.splitlines() if line.startswith("Uid:"))
    assert uids == ["65534"] * 4, uids
    assert "envreg.server" in _docker("exec", cid, "cat", "/proc/1/cmdline").stdout
    probe = (
        "import socket,sys\n"
        "try:\n    open('/probe','w')\nexcept OSError as e:\n    print('ro', e.errno)\n"
        "try:\n    open('/env/probe','w')\nexcept OSError as e:\n    print('ro', e.errno)\n"
        "open('/tmp/probe','w').write('ok'); print('tmp ok')\n"
        "s=socket.socket(); s.settimeout(2)\n"
        "try:\n    s.connect(('203.0.113.1', 80)); print('CONNECTED')\nexcept OSError as e:\n    print('offline', e)\n"
    )
    out = _docker("exec", cid, "python3", "-c", probe).stdout
    assert out.count("ro 30") == 2 or out.count("ro ") == 2, out  # EROFS (or EACCES) at / and /env
    assert "tmp ok" in out and "offline" in out and "CONNECTED" not in out, out
    info = json.loads(_docker("inspect", cid).stdout)[0]
    assert info["HostConfig"]["ReadonlyRootfs"] is True


@pytest.mark.docker
def test_rebuild_is_reproducible(reference_images) -> None:
    """Two builds in a row with no change: same manifest digests, same image IDs (base and environment)."""
    first = {r["name"]: r for r in json.loads(_envreg_build("calendar").stdout)}
    again = {r["name"]: r for r in json.loads(_envreg_build("calendar").stdout)}
    for name in ("base", "calendar"):
        assert again[name]["image_id"] == first[name]["image_id"], name
        assert again[name]["manifest_digest"] == first[name]["manifest_digest"], name


def _scratch_env(tmp_path: Path, source: str = "bank") -> tuple[str, Path, Path]:
    """A copy of a reference environment under a new name, in its own images and manifests folders."""
    name = f"scratch{uuid.uuid4().hex[:6]}"
    images, manifests = tmp_path / "images", tmp_path / "manifests"
    shutil.copytree(ROOT / "images" / source, images / name, ignore=shutil.ignore_patterns("__pycache__"))
    env_py = images / name / "env.py"
    text, n = re.subn(rf'Environment\(\s*"{source}"', f'Environment("{name}"', env_py.read_text(), count=1)
    assert n == 1
    env_py.write_text(text)
    manifests.mkdir()
    return name, images, manifests


@pytest.mark.docker
def test_invalid_manifest_is_refused_and_nothing_is_tagged(docker_engine, tmp_path: Path) -> None:
    name, images, manifests = _scratch_env(tmp_path)
    subprocess.run(
        [*ENVREG, "manifest", name, "--out", str(manifests)],
        cwd=ROOT,
        check=True,
        capture_output=True,
        env={**os.environ, "ENVREG_IMAGES": str(images)},
    )
    path = manifests / f"{name}.json"
    data = json.loads(path.read_text())
    data["tools"] = data["tools"][1:]  # hand-edited: the recorded digest no longer matches
    path.write_text(json.dumps(data, indent=2))
    proc = _envreg_build(
        name, env={"ENVREG_IMAGES": str(images), "ENVREG_MANIFESTS": str(manifests)}, check=False
    )
    assert proc.returncode == 1
    assert f"refused: {name}" in proc.stderr and "not a valid manifest" in proc.stderr, proc.stderr
    assert "nothing was built" in proc.stderr
    assert _docker("images", "-q", f"{image_prefix()}{name}").stdout.strip() == ""

    path.write_text("{not json")
    proc = _envreg_build(name, "--images-dir", str(images), "--manifests-dir", str(manifests), check=False)
    assert proc.returncode == 1 and "not a valid manifest" in proc.stderr, proc.stderr
    assert _docker("images", "-q", f"{image_prefix()}{name}").stdout.strip() == ""


@pytest.mark.docker
def test_stale_manifest_is_refused_when_frozen(docker_engine, tmp_path: Path) -> None:
    name, images, manifests = _scratch_env(tmp_path)
    env = {"ENVREG_IMAGES": str(images), "ENVREG_MANIFESTS": str(manifests)}
    subprocess.run(
        [*ENVREG, "manifest", name, "--out", str(manifests)],
        cwd=ROOT,
        check=True,
        capture_output=True,
        env={**os.environ, **env},
    )
    env_py = images / name / "env.py"
    env_py.write_text(env_py.read_text().replace('version="1.0.0"', 'version="1.0.1"', 1))
    proc = _envreg_build(name, "--frozen", env=env, check=False)
    assert proc.returncode == 1
    assert f"refused: {name}" in proc.stderr and "stale" in proc.stderr, proc.stderr
    assert _docker("images", "-q", f"{image_prefix()}{name}").stdout.strip() == ""


@pytest.mark.docker
def test_broken_environment_is_refused(docker_engine, tmp_path: Path) -> None:
    name, images, manifests = _scratch_env(tmp_path)
    (images / name / "env.py").write_text("raise RuntimeError('boom')\n")
    proc = _envreg_build(
        name, env={"ENVREG_IMAGES": str(images), "ENVREG_MANIFESTS": str(manifests)}, check=False
    )
    assert proc.returncode == 1 and "does not load" in proc.stderr and "boom" in proc.stderr, proc.stderr
    assert _docker("images", "-q", f"{image_prefix()}{name}").stdout.strip() == ""


@pytest.mark.docker
def test_build_does_not_move_a_version_tag_to_other_code(docker_engine, tmp_path: Path) -> None:
    name, images, manifests = _scratch_env(tmp_path)
    env = {"ENVREG_IMAGES": str(images), "ENVREG_MANIFESTS": str(manifests)}
    tag = f"{image_prefix()}{name}:1.0.0"
    made: list[str] = []

    def build(*args: str) -> str:
        rows = json.loads(_envreg_build(name, *args, env=env).stdout)
        made.append(next(r["image_id"] for r in rows if r["name"] == name))
        return made[-1]

    try:
        first = build()
        assert _image_id(tag) == first
        assert build() == first, "the same code rebuilds under its tag"

        env_py = images / name / "env.py"
        env_py.write_text(env_py.read_text() + "\n# other code, same version\n")
        proc = _envreg_build(name, env=env, check=False)
        assert proc.returncode == 1, proc.stdout
        said = " ".join(proc.stderr.split())
        assert f"refused: {name}: {tag} is already image {first.removeprefix('sha256:')[:12]}" in said, said
        assert "Bump the version" in said and "pass --force to move the tag" in said, said
        assert "nothing was built or tagged" in said
        assert _image_id(tag) == first, "the tag still names what it named"

        forced = build("--force")
        assert forced != first and _image_id(tag) == forced
    finally:
        for ref in (tag, f"{image_prefix()}{name}:latest", *made):
            _docker("rmi", "-f", ref, check=False)
