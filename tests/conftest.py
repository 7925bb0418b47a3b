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
REFERENCE_ENVS = ["calendar", "airline", "bank"]

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
