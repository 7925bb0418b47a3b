"""Everything the checks of one image share: the image and its manifest, two real containers of it, and the
recorded scenario runs, each made once (on first need) whatever the order the checks ask in.

Container 1 (`main`) is started cold and timed (the start-up budget); the scenarios run on it once, under
`main_lock`, with its network counters read before and after. Container 2 (`second`) is a fresh process of
the same image: the tool list after a restart, the replays for determinism (another hash seed, a later
wall clock) and the in-container sandbox probes run there.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import anyio

from envreg.env import Budgets, RejectedState, Scenario, load_scenarios
from envreg.env.budgets import DEFAULT_BUDGETS
from envreg.errors import EnvregError
from envreg.manifest import Manifest
from envreg.runtime import Runtime, Sandbox
from envreg.validate import probe
from envreg.validate.mcp_clients import ERAS, list_tools
from envreg.validate.runs import RejectionRecord, ScenarioRun, play, reject
from envreg.validate.target import Image, Target
from envreg.validate.ts import SchemaWorker

T = TypeVar("T")


class NoContainer(EnvregError):
    """A container of the image did not start: nothing that needs one can be checked (`start_error` says why)."""


REPLAY_GAP = 1.1
"""Seconds between the end of the first scenario run and the start of the replay: a tool that reads the
wall clock, even to the second, then sees another time."""


class Once(Generic[T]):
    """An async value made by the first caller; every later caller gets the same value (or error)."""

    def __init__(self, make: Callable[[], Awaitable[T]]) -> None:
        self._make = make
        self._done = anyio.Event()
        self._started = False
        self._value: T | None = None
        self._error: BaseException | None = None

    async def get(self) -> T:
        if not self._started:
            self._started = True
            try:
                self._value = await self._make()
            except Exception as exc:
                self._error = exc
            except BaseException:  # cancelled: the callers waiting for it must not get a None
                self._error = RuntimeError("interrupted while it was being made")
                raise
            finally:
                self._done.set()
        await self._done.wait()
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]


@dataclass
class Runs:
    """The first play of every scenario and rejected state, on container 1."""

    scenarios: list[ScenarioRun]
    rejections: list[RejectionRecord]
    counters_moved: dict[str, int] = field(default_factory=dict)
    counters_error: str | None = None

    @property
    def ended(self) -> float:
        return max((r.ended for r in self.scenarios), default=0.0)


@dataclass
class Listing:
    """A tool list as a real MCP client of one era got it."""

    era: str
    protocol: str
    tools: list[dict[str, Any]]


class Context:
    """One image under validation (see the module doc)."""

    def __init__(self, rt: Runtime, target: Target, image: Image, worker: SchemaWorker) -> None:
        self.rt = rt
        self.target = target
        self.image = image
        self.worker = worker
        self.main_lock = anyio.Lock()
        self.second_lock = anyio.Lock()
        self.startup_ms: float | None = None
        self.start_error: str | None = None
        """Why a container of the image did not start (reported once, for the whole image)."""
        self.sandboxes: list[Sandbox] = []
        self.manifest_raw = _read(image.env_dir / "manifest.json")
        self.manifest_json: dict[str, Any] = {}
        self.manifest: Manifest | None = None
        self.manifest_problem: str | None = None
        self._parse_manifest()
        self.scenarios: list[Scenario] = []
        self.rejected: list[RejectedState] = []
        self.scenarios_problem: str | None = None
        try:
            self.scenarios, self.rejected = load_scenarios(image.env_dir)
        except ValueError as exc:
            self.scenarios_problem = f"the scenarios under /env/scenarios do not load: {exc}"
        self._main = Once(self._start_main)
        self._second = Once(self._start_second)
        self._runs = Once(self._play_all)
        self._replays = Once(self._replay_all)
        self._shared: dict[str, Once[Any]] = {}

    def _parse_manifest(self) -> None:
        if self.manifest_raw is None:
            self.manifest_problem = "the image has no /env/manifest.json"
            return
        try:
            self.manifest_json = json.loads(self.manifest_raw)
            self.manifest = Manifest.loads(self.manifest_raw)
        except ValueError as exc:
            self.manifest_problem = f"/env/manifest.json is not a valid manifest: {exc}"

    # facts from the manifest ----------------------------------------------------------------------
    @property
    def tools(self) -> dict[str, dict[str, Any]]:
        """The manifest's tools by name, in wire form."""
        return {
            t["name"]: t for t in self.manifest_json.get("tools", []) if isinstance(t, dict) and "name" in t
        }

    @property
    def volatile(self) -> list[str]:
        return list(self.manifest_json.get("volatile") or [])

    @property
    def budgets(self) -> tuple[Budgets, bool]:
        """(the budgets, whether the manifest declares them)."""
        declared = (self.manifest_json.get("runtime") or {}).get("budgets")
        return (Budgets.model_validate(declared), True) if declared else (DEFAULT_BUDGETS, False)

    @property
    def limits(self) -> dict[str, int] | None:
        """The size limits the manifest declares (``runtime.limits``), if any."""
        limits = (self.manifest_json.get("runtime") or {}).get("limits")
        return limits if isinstance(limits, dict) else None

    def read_only(self, tool: str) -> bool:
        return bool((self.tools.get(tool, {}).get("annotations") or {}).get("readOnlyHint"))

    # containers -----------------------------------------------------------------------------------
    async def main(self) -> Sandbox:
        """Container 1, started cold; its start-up time is `startup_ms`."""
        return await self._main.get()

    async def second(self) -> Sandbox:
        """Container 2: a fresh process of the same image, started once container 1 answers."""
        return await self._second.get()

    async def _start_main(self) -> Sandbox:
        t0 = time.perf_counter()
        sandbox = await self._start("container 1")
        await sandbox.list_tools()
        self.startup_ms = (time.perf_counter() - t0) * 1000
        return sandbox

    async def _start_second(self) -> Sandbox:
        await self.main()
        return await self._start("container 2")

    async def _start(self, which: str) -> Sandbox:
        try:
            sandbox = await self.rt.sandbox(self.image.runtime_ref, isolation="container")
        except EnvregError as exc:
            self.start_error = self.start_error or f"{which} of the image did not start: {exc}"
            raise NoContainer(f"{which} did not start (see the image's error)") from None
        self.sandboxes.append(sandbox)
        return sandbox

    @staticmethod
    def container(sandbox: Sandbox) -> Any:
        """The Docker container of a container-tier sandbox."""
        return sandbox.server.handle

    # recorded runs --------------------------------------------------------------------------------
    async def runs(self) -> Runs:
        return await self._runs.get()

    async def replays(self) -> list[ScenarioRun]:
        """Every scenario played again, on container 2, at least `REPLAY_GAP` s after the first runs."""
        return await self._replays.get()

    async def _play_all(self) -> Runs:
        sandbox = await self.main()
        container = self.container(sandbox)
        async with self.main_lock:
            before, error = await _counters(container)
            scenarios = [await play(sandbox, s) for s in self.scenarios]
            after, error2 = await _counters(container)
            rejections = [await reject(sandbox, r) for r in self.rejected]
        runs = Runs(scenarios, rejections, counters_error=error or error2)
        if before is not None and after is not None:
            runs.counters_moved = probe.moved(before, after)
        return runs

    async def _replay_all(self) -> list[ScenarioRun]:
        first = await self.runs()
        sandbox = await self.second()
        await anyio.sleep(max(0.0, first.ended + REPLAY_GAP - time.monotonic()))
        async with self.second_lock:
            return [await play(sandbox, s) for s in self.scenarios]

    async def shared(self, key: str, make: Callable[[], Awaitable[T]]) -> T:
        """A value made once per image by the first check that needs it (`make`), shared with the others."""
        if key not in self._shared:
            self._shared[key] = Once(make)
        return await self._shared[key].get()

    # tool lists -----------------------------------------------------------------------------------
    async def listings(self, which: str) -> list[Listing]:
        """The tool list of container ``main`` or ``second`` through the gateway, in both protocol eras."""
        start = {"main": self.main, "second": self.second}[which]
        return await self.shared(f"listings-{which}", lambda: self._list(start))

    async def _list(self, start: Callable[[], Awaitable[Sandbox]]) -> list[Listing]:
        sandbox = await start()
        if sandbox.mcp_url is None:
            raise RuntimeError("the sandbox has no MCP URL (the runtime's gateway is off)")
        found = []
        for era in ERAS:
            protocol, tools = await list_tools(sandbox.mcp_url, sandbox.token, era)
            found.append(Listing(era, protocol, tools))
        return found

    async def close(self) -> None:
        with anyio.CancelScope(shield=True):
            for sandbox in self.sandboxes:
                await sandbox.close()
        self.image.cleanup()


async def _counters(container: Any) -> tuple[dict[str, int] | None, str | None]:
    try:
        return await probe.counters(container), None
    except probe.ProbeError as exc:
        return None, str(exc)


def _read(path: Any) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None
