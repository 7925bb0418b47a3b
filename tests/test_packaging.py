"""envreg installs like a library: ranges in pyproject.toml with the exact pins in the locks, a wheel that
carries the catalog and works outside any checkout, and a co-install beside vLLM, verl and LLaMA-Factory that
downgrades none of their packages."""

from __future__ import annotations

import fcntl
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from envreg import __version__
from envreg.resources import catalog_files

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def locked() -> dict[str, Version]:
    pins = {}
    for line in (ROOT / "requirements.lock").read_text().splitlines():
        if m := re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", line):
            pins[re.sub(r"[-_.]+", "-", m[1]).lower()] = Version(m[2])
    return pins


# extras requirements.lock does not hold: the bench's comparison tools, and the integrations that
# `scripts/bootstrap --trainers` / `--tau2` install beside the locked set (their own pins conflict with it;
# scripts/trainer-constraints.txt holds what keeps them beside it)
UNLOCKED_EXTRAS = {"bench", "verl", "trl", "verifiers", "tau2"}


def requirements() -> list[Requirement]:
    extras = PYPROJECT["optional-dependencies"]
    reqs = [Requirement(r) for r in PYPROJECT["dependencies"]]
    return reqs + [Requirement(r) for name, rs in extras.items() if name not in UNLOCKED_EXTRAS for r in rs]


def test_ranges_in_pyproject_and_exact_pins_only_in_the_lock() -> None:
    pins = locked()
    for req in requirements():
        if req.name == "envreg":
            continue
        assert not any(s.operator == "==" for s in req.specifier), f"{req}: an exact pin belongs in the lock"
        name = re.sub(r"[-_.]+", "-", req.name).lower()
        assert name in pins, f"{req.name} is not in requirements.lock: run scripts/lock"
        assert req.specifier.contains(pins[name], prereleases=True), (
            f"the lock's {name} {pins[name]} is outside {req}"
        )
    assert PYPROJECT["version"] == __version__


def test_server_dependencies_are_an_extra() -> None:
    core = {Requirement(r).name for r in PYPROJECT["dependencies"]}
    assert "fastapi" not in core and "uvloop" not in core
    assert {Requirement(r).name for r in PYPROJECT["optional-dependencies"]["server"]} >= {
        "fastapi",
        "uvloop",
    }


WITHOUT_SYNTH = """
import sys
sys.modules.update(dict.fromkeys(["networkx", "torch", "sentence_transformers"]))  # as if not installed
from envreg.synth.scenarios import scenario_records
from envreg.synth.graph import load_manifests
records = scenario_records("calendar")
print(len(records), len(load_manifests("manifests", ["calendar"])))
"""


def test_scenario_records_and_the_catalog_need_no_synth_extra() -> None:
    """`envreg augment` over committed scenarios and `envreg envgen propose` (gaps only) read the manifests
    and replay scenarios: neither needs networkx or torch."""
    proc = subprocess.run(
        [sys.executable, "-c", WITHOUT_SYNTH], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    records, manifests = map(int, proc.stdout.split())
    assert records > 0 and manifests == 1


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Path:
    """The wheel `pip wheel .` builds from this checkout (the build hook copies the catalog in): built once
    per test run, under a lock, for every xdist worker (two builds at once collide in the checkout's build/)."""
    run_root = tmp_path_factory.getbasetemp()  # xdist: each worker's is a folder of the run's own
    out = (run_root if worker_id == "master" else run_root.parent) / "envreg-wheel"
    out.mkdir(exist_ok=True)
    with open(out / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not list(out.glob("envreg-*.whl")):
            proc = subprocess.run(
                [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(out), str(ROOT)],
                capture_output=True,
                text=True,
                timeout=600,
            )
            assert proc.returncode == 0, proc.stderr[-3000:]
    (found,) = out.glob("envreg-*.whl")
    return found


@pytest.mark.slow
def test_the_wheel_carries_the_catalog_and_the_metadata(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        metadata = zf.read(f"envreg-{__version__}.dist-info/METADATA").decode()
    expected = {f"envreg/_catalog/{rel}" for rel in catalog_files(ROOT)}
    assert expected <= names, sorted(expected - names)[:10]
    assert {
        "envreg/py.typed",
        "envreg/_catalog/docker-bake.hcl",
        "envreg/_catalog/images/base/Dockerfile",
        "envreg/console/templates/layout.html",
        "envreg/console/templates/login.html",
        "envreg/console/static/console.css",
        "envreg/console/static/console.js",
    } <= names, "the console's assets ship in the wheel"
    assert sum(n.startswith("envreg/_catalog/manifests/") for n in names) == len(
        list((ROOT / "manifests").glob("*.json"))
    )
    assert not any("__pycache__" in n or n.endswith(".pyc") for n in names)
    assert f"envreg-{__version__}.dist-info/licenses/LICENSE" in names
    assert "License-Expression: Apache-2.0" in metadata and "Requires-Python: >=3.11" in metadata
    assert "Provides-Extra: server" in metadata and "Classifier: Typing :: Typed" in metadata


def outside_env(**extra: str) -> dict[str, str]:
    """This environment as a user outside any checkout has it: no ENVREG_* setting, no PYTHONPATH (which
    could point at a checkout, whose envreg.egg-info pip would take for an installed envreg)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENVREG_") and k != "PYTHONPATH"}
    return env | extra


def _venv(where: Path, wheel: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", str(where)], check=True, timeout=120)
    proc = subprocess.run(
        [
            str(where / "bin/pip"),
            "install",
            "--quiet",
            f"{wheel}[reward]",
            "-c",
            str(ROOT / "requirements.lock"),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        env=outside_env(),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (where / "bin" / "envreg").is_file(), proc.stdout[-3000:]
    return where / "bin"


@pytest.mark.slow
def test_a_wheel_install_works_outside_any_checkout(wheel: Path, tmp_path: Path) -> None:
    """pip install the wheel into a fresh venv, then from a folder that is no checkout: the catalog, search,
    inspect, a local sandbox an MCP client plays, a local episode, and the verl reward function."""
    bin_ = _venv(tmp_path / "venv", wheel)
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = outside_env(ENVREG_HOME=str(tmp_path / "home"), DOCKER_HOST=f"unix://{tmp_path}/no-engine.sock")

    def envreg(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(bin_ / "envreg"), *args], cwd=work, env=env, capture_output=True, text=True, timeout=timeout
        )

    catalog = envreg("catalog", "--json")
    assert catalog.returncode == 0, catalog.stderr
    assert len(json.loads(catalog.stdout)) == len(list((ROOT / "manifests").glob("*.json")))
    hits = json.loads(envreg("search", "get_directions", "--json").stdout)
    assert [(h["name"], h["where"]) for h in hits] == [("maps", "catalog")]
    assert json.loads(envreg("inspect", "maps", "--json").stdout)["manifest"]["name"] == "maps"

    episode = envreg("episode", "calendar", "--isolation", "local", "--json", timeout=300)
    assert episode.returncode == 0, episode.stderr
    report = json.loads(episode.stdout)
    assert report["state_matches"] is True and report["reward"]["reward"] == 1.0

    proc = subprocess.Popen(
        [str(bin_ / "envreg"), "run", "calendar", "--isolation", "local", "--json"],
        cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        sandbox = json.loads(proc.stdout.readline())
        assert sandbox["isolation"] == "local" and sandbox["mcp_url"].startswith("http://127.0.0.1:")
        listed = _call_tools(sandbox["mcp_url"], sandbox["token"])
        assert "list_calendars" in listed
    finally:
        proc.terminate()
        proc.wait(30)
    assert proc.returncode in (0, 130, -15), proc.stderr.read() if proc.stderr else ""

    engine = envreg("gc")
    assert engine.returncode == 1 and "hint:" in engine.stderr and "setup-docker" not in engine.stderr

    record = _verl_record()
    score = subprocess.run(
        [str(bin_ / "python"), "-c", VERL.format(record=record)],
        cwd=work, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert score.returncode == 0, score.stderr
    assert json.loads(score.stdout.strip().splitlines()[-1])["score"] == 1.0


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_envreg_build_works_outside_any_checkout(docker_engine: None, wheel: Path, tmp_path: Path) -> None:
    """From a fresh venv holding the wheel, in a folder that is no checkout: `envreg build calendar` builds
    the base and the calendar image from the catalog the wheel carries, under ENVREG_IMAGE_PREFIX, labelled
    with the digest of the manifest the wheel ships."""
    bin_ = _venv(tmp_path / "venv", wheel)
    work = tmp_path / "elsewhere"
    work.mkdir()
    prefix = f"wheel-{secrets.token_hex(4)}"
    env = outside_env(ENVREG_HOME=str(tmp_path / "home"), ENVREG_IMAGE_PREFIX=prefix)
    shipped = json.loads((ROOT / "manifests" / "calendar.json").read_text())
    tags = [f"{prefix}/base:{__version__}", f"{prefix}/calendar:{shipped['version']}"]
    try:
        proc = subprocess.run(
            [str(bin_ / "envreg"), "build", "calendar", "--json"],
            cwd=work, env=env, capture_output=True, text=True, timeout=1500,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-3000:]
        rows = {row["name"]: row for row in json.loads(proc.stdout)}
        assert [rows["base"]["tag"], rows["calendar"]["tag"]] == tags
        assert rows["calendar"]["manifest_digest"] == shipped["digests"]["manifest"]
        labels = subprocess.run(
            ["docker", "image", "inspect", "--format", "{{json .Config.Labels}}", tags[1]],
            capture_output=True, text=True, check=True, timeout=60,
        ).stdout  # fmt: skip
        assert shipped["digests"]["manifest"] in json.loads(labels).values()
        assert not (work / "manifests").exists() and not (work / ".cache").exists()
    finally:  # every tag the build made under the prefix: the versions' and `latest`
        made = subprocess.run(
            ["docker", "image", "ls", "--format", "{{.Repository}}:{{.Tag}}", "--filter", f"reference={prefix}/*"],
            capture_output=True, text=True, timeout=60,
        ).stdout.split()  # fmt: skip
        subprocess.run(["docker", "image", "rm", *made], capture_output=True, timeout=120)


def _call_tools(url: str, token: str) -> list[str]:
    import anyio
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    async def main() -> list[str]:
        async with httpx2.AsyncClient(headers={"authorization": f"Bearer {token}"}) as http:
            async with Client(streamable_http_client(url, http_client=http)) as client:
                tools = await client.list_tools()
                result = await client.call_tool("list_calendars", {})
                assert not result.is_error
                return [t.name for t in tools.tools]

    return anyio.run(main)


VERL = """
import json
from envreg.reward.verl import compute_score
record = {record!r}
calls = json.loads(record)["calls"]
text = "".join('<tool_call>' + json.dumps({{"name": c["tool"], "arguments": c["arguments"]}}) + '</tool_call>' for c in calls)
print(json.dumps(compute_score("envreg", text, record, {{}})))
"""


def _verl_record() -> str:
    """A ground truth as the RL export writes it: a calendar scenario's calls, initial and final state."""
    from envreg.env import load_environment, load_scenarios

    env = load_environment(ROOT / "images" / "calendar")
    scenario = next(s for s in load_scenarios(env.folder)[0] if s.initial_state)
    instance = env.instance(scenario.initial_state)
    calls = []
    for step in scenario.steps:
        outcome = instance.call_tool(step.tool, step.arguments)
        if not outcome.is_error:
            calls.append({"env": "calendar", "tool": step.tool, "arguments": step.arguments, "masked": []})
    truth = {
        "envs": ["calendar"],
        "calls": calls,
        "initial_states": {"calendar": scenario.initial_state},
        "final_states": {"calendar": instance.state.to_json()},
        "volatile": {"calendar": list(env.volatile)},
    }
    return json.dumps(truth)


# ------------------------------------------------------------------------------------------------------------
# beside the RL stacks: uv's resolver, metadata only
# ------------------------------------------------------------------------------------------------------------

STACKS = {
    "vllm": ["vllm==0.33.0"],
    "verl": ["verl[vllm]==0.9.1"],
    "llamafactory": ["llamafactory==0.9.5"],
}


def _uv() -> str:
    """uv from this venv (the dev extra installs it) or PATH."""
    found = shutil.which(
        "uv", path=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    )
    if not found:
        pytest.fail("uv is not installed: the co-install check resolves with it (pip install -e '.[dev]')")
    return found


@pytest.fixture(scope="session")
def uv_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One uv cache for the session's resolutions: the stacks share most of their metadata (torch, CUDA)."""
    return tmp_path_factory.mktemp("uv-cache")


def _resolve(requirements: list[str], out: Path, cache: Path) -> dict[str, str]:
    """What an install of `requirements` would get on CPython 3.11, linux x86_64 (whatever this machine is),
    from PyPI alone: `uv pip compile` with no config file, no local index or wheel folder and no constraints,
    name -> version. Metadata only: no wheel is installed or built."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "requirements.in").write_text("\n".join(requirements) + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("UV_", "PIP_"))}
    proc = subprocess.run(
        [
            _uv(), "pip", "compile", "--quiet", "--no-config", "--native-tls", "--no-header", "--no-annotate",
            "--python-version", "3.11", "--python-platform", "x86_64-manylinux_2_28",
            "--index-url", "https://pypi.org/simple", "--cache-dir", str(cache),
            "-o", str(out / "resolved.txt"), str(out / "requirements.in"),
        ],
        capture_output=True, text=True, timeout=900, env=env,
    )  # fmt: skip
    if proc.returncode:
        pytest.fail(f"{requirements} do not resolve together:\n{proc.stderr[-3000:]}")
    resolved = {}
    for line in (out / "resolved.txt").read_text().splitlines():
        if line.strip() and not line.startswith(("#", " ")):
            req = Requirement(line)  # name==version, or name @ URL for the local wheel
            version = req.url or next(iter(req.specifier)).version
            resolved[re.sub(r"[-_.]+", "-", req.name).lower()] = version
    return resolved


def _pypi_reachable() -> bool:
    import httpx2

    try:
        return httpx2.head("https://pypi.org/simple/pip/", timeout=10).status_code < 500
    except httpx2.HTTPError:
        return False


def downgrades(alone: dict[str, str], together: dict[str, str]) -> dict[str, str]:
    """Each package of `alone` that `together` lacks or holds at a lower version: name -> "old -> new"."""
    return {
        name: f"{version} -> {together.get(name, 'removed')}"
        for name, version in alone.items()
        if name not in together or Version(together[name]) < Version(version)
    }


def test_downgrades_sees_a_lower_version_and_a_removed_package() -> None:
    alone = {"vllm": "0.33.0", "torch": "2.14.0", "gradio": "5.50.0"}
    together = {"vllm": "0.33.0", "torch": "2.14.1", "envreg": "0.1.0"}
    assert downgrades(alone, together) == {"gradio": "5.50.0 -> removed"}
    assert downgrades(alone, {**together, "gradio": "5.1.0"}) == {"gradio": "5.50.0 -> 5.1.0"}


@pytest.mark.slow
@pytest.mark.lowest  # resolved by uv 0.9.0 there, the floor of the dev extra
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("stack", list(STACKS))
def test_installing_beside_an_rl_stack_downgrades_none_of_its_packages(
    stack: str, wheel: Path, uv_cache: Path, tmp_path: Path
) -> None:
    """The stack alone, then the stack with the envreg wheel and its server extra: every package the stack
    resolved to is still there at its version or a higher one. Metadata only: no torch wheel is downloaded."""
    if not _pypi_reachable():
        pytest.skip("PyPI is not reachable from here: the co-install check needs its metadata")
    alone = _resolve(STACKS[stack], tmp_path / "alone", uv_cache)
    together = _resolve(
        [*STACKS[stack], f"envreg[server] @ {wheel.as_uri()}"], tmp_path / "together", uv_cache
    )
    assert stack in alone and "torch" in alone, alone
    assert "envreg" in together and "fastapi" in together
    assert not downgrades(alone, together), (
        f"envreg downgrades {stack}'s packages: {downgrades(alone, together)}"
    )
    big = [p for p in uv_cache.rglob("*") if p.is_file() and p.stat().st_size > 50_000_000]
    assert not big, f"the resolution downloaded whole wheels: {big}"
