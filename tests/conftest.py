from __future__ import annotations

import gc
import importlib.util
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"
COUNTER = str(FIXTURES / "counter")
os.environ.setdefault("ENVREG_IMAGES", str(ROOT / "images"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
# every environment of the catalog: the folders under images/ with an env.py (what the test images are)
IMAGE_ENVS = sorted(p.parent.name for p in (ROOT / "images").glob("*/env.py"))
# the environments the catalog-wide tests walk: all but tau2's, whose states are tau2's whole databases
# (MBs; tests/test_adapters_tau2.py replays them, `envreg validate --all` checks their images)
REFERENCE_ENVS = [name for name in IMAGE_ENVS if not name.startswith("tau2-")]

from servers import EnvServerProcess, stop_all  # noqa: E402

# Scale tests carry `@pytest.mark.slow`: `scripts/test --full` (CI, ENVREG_TEST_FULL=1) runs them at full size,
# the default `scripts/test` at the smaller size each names, `scripts/test --fast` not at all.
FULL_SIZE = os.environ.get("ENVREG_TEST_FULL") == "1"
EMBEDDINGS = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "envreg-tests" / "embeddings"
"""The tests' embeddings, by model and text digest, kept on this machine between runs and clones (issue 19: a
clean clone's first synthesis tests loaded the model and embedded the catalog on two workers at once, 55-65 s)."""


needs_main_thread = pytest.mark.skipif(
    threading.current_thread() is not threading.main_thread(), reason="signal handlers are the main thread's"
)


def scaled(full: int, small: int) -> int:
    """`full` under `scripts/test --full` (CI), else `small`."""
    return full if FULL_SIZE else small


def installed(*modules: str) -> bool:
    """Whether every one of `modules` is installed, found without importing it: each xdist worker collects
    every test module, and importing torch, sentence-transformers or verl there costs seconds per worker."""
    return all(importlib.util.find_spec(m) is not None for m in modules)


_WITHOUT = """
import sys
class Missing:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {blocked!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
sys.meta_path.insert(0, Missing())
from envreg.cli.main import app
app({args!r}, prog_name="envreg")
"""


def envreg_without(blocked: set[str], args: list[str], **kwargs) -> subprocess.CompletedProcess:
    """`envreg ARGS` in a new process where importing a module of `blocked` fails, as in a venv without them."""
    code = _WITHOUT.format(blocked=blocked, args=args)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, **kwargs)


def bfcl_entries(categories: tuple[str, ...] | None = None) -> list:
    """BFCL's multi-turn entries: all 200 of each category under `--full`, else 40 evenly spread over each
    (every 5th: short and long ones, every class)."""
    from envreg.adapters import bfcl

    per_category = scaled(200, 40)
    out = []
    for category in categories or bfcl.CATEGORIES:
        entries = bfcl.load_entries([category])
        out += entries[:: max(1, len(entries) // per_category)][:per_category]
    return out


SHARED_MODULE_FIXTURES = frozenset(
    {"broken_images", "envfactory_images", "exported", "oracles", "rl_parquet"}
)
"""Module-scoped fixtures that take seconds to tens of seconds to build (images, synthesized trajectories)."""


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own, which reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests that share a worker (`--dist loadgroup`), since each worker would otherwise build the same
    thing again: those parametrized by an environment `name` that use `env_server`, one worker per
    environment (a server of every catalog environment on each worker); those of one module that use one
    of its `SHARED_MODULE_FIXTURES` (the validate suite's broken images were built on every worker that ran
    one of their tests, 80 s each)."""
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        callspec = getattr(item, "callspec", None)
        if callspec and "name" in callspec.params and "env_server" in fixtures:
            item.add_marker(pytest.mark.xdist_group(f"env-server-{callspec.params['name']}"))
        elif SHARED_MODULE_FIXTURES.intersection(fixtures):
            item.add_marker(pytest.mark.xdist_group(f"shared-{item.module.__name__}"))


def pytest_collection_finish(session: pytest.Session) -> None:
    """Refuse to run grouped tests on several workers without `--dist loadgroup` (the tests of a group would
    run at once: one test's `envreg gc --grace 0` removes what another's killed runtime left), and when
    `--dist loadgroup` would not keep a group on one worker (pytest-xdist marks a grouped test by an `@group`
    suffix of its node id; pytest 9.2 drops it, and nothing else would say so)."""
    if not getattr(session.config.option, "loadgroup", False):
        grouped = [i.nodeid for i in session.items if i.get_closest_marker("xdist_group")]
        workers = getattr(session.config, "workerinput", {}).get("workercount", 0)  # set on xdist's workers
        if grouped and workers > 1:
            raise RuntimeError(
                f"{len(grouped)} test(s) here share a worker by group ({grouped[0]}, ...): run with --dist "
                "loadgroup beside -n (as scripts/test does), or on one worker (-n 0)"
            )
        return
    ungrouped = [
        i.nodeid for i in session.items if i.get_closest_marker("xdist_group") and "@" not in i.nodeid
    ]
    if ungrouped:
        raise RuntimeError(
            f"--dist loadgroup does not group here ({ungrouped[0]} has no @group suffix): this pytest and "
            "pytest-xdist do not work together (pytest-dev/pytest-xdist#1386); install the locked versions "
            "(scripts/bootstrap)"
        )


def pytest_configure(config: pytest.Config) -> None:
    """Collect garbage less often on every worker. A worker holds large live heaps (tau2's databases, the
    embedding model, torch), and CPython's default thresholds walked them in full 23-79 times per worker:
    about 15 CPU-s of each fast-suite worker's 70, 2-4 CPU-s with these (issue 19). Cyclic garbage is still
    collected, in fewer passes."""
    gc.set_threshold(20_000, 20, 20)
    check_each_schema_once()


def check_each_schema_once() -> None:
    """Check a JSON Schema against its metaschema once per test process, not once per MCP session.

    The `mcp` SDK's client checks a tool's output schema (`check_schema`) before it validates the tool's first
    result in a session, and keeps the compiled validator for that session only; with the 2020-12 metaschema a
    check costs 5-10 ms. The tests open hundreds of sessions on the same few hundred schemas: the fast suite
    spent about 15 CPU-s checking them again (issue 19). Whether a schema passes depends on the schema alone,
    so a passing schema is remembered; one that fails raises every time, and every result is still validated
    against its schema."""
    import json

    import jsonschema

    validator = jsonschema.validators.validator_for({})  # the SDK's, for schemas that name no `$schema`
    check = validator.check_schema
    passed: set[str] = set()

    def check_schema(schema, *args, **kwargs) -> None:
        try:
            key = json.dumps([schema, args, kwargs], sort_keys=True)
        except TypeError:  # not JSON (a test's bad schema, a format checker): checked each time
            return check(schema, *args, **kwargs)
        if key not in passed:
            check(schema, *args, **kwargs)
            passed.add(key)

    validator.check_schema = staticmethod(check_schema)


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    """Session-wide, so that module-scoped async fixtures (a `Runtime` shared by a module's tests) work."""
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
    stop_all(started.values())


@pytest.fixture(scope="session")
def docker_engine() -> None:
    """A running engine with buildx: started by scripts/setup-docker when it is not."""
    import subprocess

    for check in (["docker", "info"], ["docker", "buildx", "version"]):
        if subprocess.run(check, capture_output=True).returncode != 0:
            subprocess.run([str(ROOT / "scripts" / "setup-docker")], check=True, timeout=1200)


@pytest.fixture(scope="session")
def reference_images(docker_engine) -> dict[str, dict]:
    """The reference environment images of this checkout, built once per test run: `envreg build --json`'s
    rows by name.

    `scripts/test` builds them before pytest starts and names its output in ENVREG_TEST_IMAGES; without it,
    the first xdist worker to get here builds (`--force`: the tests run this checkout's code, so its images
    replace whatever another checkout built under the same tags on a shared engine) while the others wait on
    a file lock, then read its rows.
    """
    import fcntl
    import json
    import subprocess

    if given := os.environ.get("ENVREG_TEST_IMAGES"):
        rows = json.loads(Path(given).read_text())
        return {row["name"]: row for row in rows}
    cache = ROOT / ".cache"
    cache.mkdir(exist_ok=True)
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID") or f"pid{os.getpid()}"
    built = cache / f"test-images-{run}.json"
    with open(cache / "test-images.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not built.is_file():
            proc = subprocess.run(
                # the whole folder, as `scripts/test` builds it: what needs an extra this venv lacks (tau2's) is
                # skipped, and so are the tests of that extra
                [sys.executable, "-m", "envreg.cli.main", "build", "--json", "--force"],
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=1800,
            )
            assert proc.returncode == 0, f"envreg build failed:\n{proc.stdout}\n{proc.stderr}"
            for old in cache.glob("test-images-*.json"):
                old.unlink()
            built.write_text(proc.stdout)
        rows = json.loads(built.read_text())
    return {row["name"]: row for row in rows}
