from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"
COUNTER = str(FIXTURES / "counter")
os.environ.setdefault("ENVREG_IMAGES", str(ROOT / "images"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
# every environment of the catalog: the folders under images/ with an env.py
REFERENCE_ENVS = sorted(p.parent.name for p in (ROOT / "images").glob("*/env.py"))

from servers import EnvServerProcess  # noqa: E402


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def envreg_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path_factory.mktemp("envreg-home")
    monkeypatch.setenv("ENVREG_HOME", str(home))
    return home


@pytest.fixture(scope="session")
def env_server() -> Iterator[callable]:
    """Start (once per session and configuration) a real `envreg serve-env` on loopback."""
    started: dict[tuple, EnvServerProcess] = {}

    def get(env: str, fast_path: bool = True, *extra: str) -> EnvServerProcess:
        key = (env, fast_path, extra)
        if key not in started:
            started[key] = EnvServerProcess(env, fast_path=fast_path, extra=list(extra)).start()
        return started[key]

    yield get
    for server in started.values():
        server.stop()


@pytest.fixture(scope="session")
def docker_engine() -> None:
    """A running engine with buildx: started by scripts/setup-docker when it is not."""
    import subprocess

    for check in (["docker", "info"], ["docker", "buildx", "version"]):
        if subprocess.run(check, capture_output=True).returncode != 0:
            subprocess.run([str(ROOT / "scripts" / "setup-docker")], check=True, timeout=1200)


@pytest.fixture(scope="session")
def reference_images(docker_engine) -> dict[str, dict]:
    """The reference environment images, built once per session (a no-op when they are current).

    `--force`: the tests run this checkout's code, so its images replace whatever another checkout built
    under the same envreg/<name>:<version> tags on a shared engine.
    ENVREG_TEST_SKIP_BUILD=1 uses the images already in the engine, as they are.
    """
    import json
    import subprocess

    if os.environ.get("ENVREG_TEST_SKIP_BUILD"):
        return {}

    proc = subprocess.run(
        [sys.executable, "-m", "envreg.cli.main", "build", "--json", "--force", *REFERENCE_ENVS],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert proc.returncode == 0, f"envreg build failed:\n{proc.stdout}\n{proc.stderr}"
    return {row["name"]: row for row in json.loads(proc.stdout)}
