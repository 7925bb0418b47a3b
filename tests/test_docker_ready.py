"""How the Docker backend waits on a starting server: its health is polled every `READY_POLL`, the engine's
status (an inspect call, which costs dockerd) read at most every `STATUS_POLL`, and an exit is seen at the
first read. No engine: the server and the status reads are the test's."""

from __future__ import annotations

import itertools
import time
from types import SimpleNamespace

import httpx2
import pytest

from envreg.errors import EngineError, UpstreamError
from envreg.runtime.backends.docker import STATUS_POLL, DockerBackend

pytestmark = pytest.mark.anyio


class Starting:
    """A server's client whose health check is refused for `seconds`."""

    def __init__(self, seconds: float) -> None:
        self.up_at = time.monotonic() + seconds
        self.polls = 0

    async def healthz(self) -> dict:
        self.polls += 1
        if time.monotonic() < self.up_at:
            raise UpstreamError("connection refused")
        return {"generation": 0}


def backend(status: str) -> tuple[DockerBackend, list[float], list[object]]:
    """A backend whose engine says `status` for every server, and the times it was asked and what it stopped."""
    found = DockerBackend("ready-test", httpx2.AsyncClient())
    reads: list[float] = []
    stopped: list[object] = []

    async def read(server) -> str:
        reads.append(time.monotonic())
        return status

    async def stop(server) -> None:
        stopped.append(server)

    found.status = read  # type: ignore[method-assign]
    found.stop = stop  # type: ignore[method-assign]
    return found, reads, stopped


def server(client: Starting) -> SimpleNamespace:
    logs = SimpleNamespace(logs=lambda tail: b"ImportError: no module named env\n")
    return SimpleNamespace(
        client=client, dedicated=False, spec=SimpleNamespace(name="bank", key="sha256:ab"), handle=logs
    )


async def test_a_starting_server_is_polled_often_and_the_engine_asked_four_times_a_second() -> None:
    client = Starting(1.0)
    docker, reads, stopped = backend("running")
    await docker._wait_ready(server(client))  # type: ignore[arg-type]
    assert 1 <= len(reads) <= 1.0 / STATUS_POLL + 1, f"{len(reads)} status reads in 1 s"
    assert all(b - a >= STATUS_POLL * 0.99 for a, b in itertools.pairwise(reads))
    assert client.polls > 2 * len(reads), "the health check is polled at its own pace, every READY_POLL"
    assert stopped == []


async def test_a_server_that_exits_while_starting_is_seen_at_the_first_status_read() -> None:
    client = Starting(60.0)
    docker, reads, stopped = backend("exited")
    starting = server(client)
    with pytest.raises(
        EngineError, match=r"bank \(sha256:ab\) exited while starting \(exited\):\nImportError"
    ):
        await docker._wait_ready(starting)  # type: ignore[arg-type]
    assert len(reads) == 1
    assert stopped == [starting], "the container is removed"
