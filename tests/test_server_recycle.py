"""A recyclable server (``ENVREG_RECYCLE=1``): `POST /recycle` gives a fresh process, nothing kept."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest
from servers import EnvServerProcess, modern_request

from envreg.http.client import request as http_request

LEAKY_ENV = '''
"""Keeps a list in a module global: what a recycle must not carry to the next sandbox."""
from envreg.env import Environment, EnvState

SEEN: list[str] = []


class Empty(EnvState):
    pass


env = Environment("leaky", Empty, version="1.0.0", domain="test", description="Leaks through a global.")


@env.tool
def litter(state: Empty, shm: str) -> int:
    """Leave behind what a recycle must remove: an unwritable temp folder, a shared-memory entry and a
    daemonized process; returns the process's id.

    Args:
        shm: The shared-memory folder.
    """
    import os, pathlib, subprocess, tempfile

    folder = pathlib.Path(tempfile.gettempdir()) / "locked"
    (folder / "inner").mkdir(parents=True)
    (folder / "inner" / "file").write_text("x")
    (folder / "inner").chmod(0o500)
    folder.chmod(0o500)
    (pathlib.Path(shm) / "envreg-litter").write_text("x")
    daemon = subprocess.Popen(
        ["sh", "-c", "sleep 300 >/dev/null 2>&1 & echo $!"], stdout=subprocess.PIPE, start_new_session=True, text=True
    )
    pid = int(daemon.stdout.readline().strip())
    daemon.wait()
    return pid


@env.tool
def remember(state: Empty, word: str) -> list[str]:
    """Add a word to the module's list and return the list.

    Args:
        word: The word to keep.
    """
    SEEN.append(word)
    return list(SEEN)
'''


@pytest.fixture
def server(tmp_path: Path) -> Iterator[EnvServerProcess]:
    folder = tmp_path / "leaky"
    folder.mkdir()
    (folder / "env.py").write_text(LEAKY_ENV)
    scratch, shm = tmp_path / "scratch", tmp_path / "shm"
    scratch.mkdir()
    shm.mkdir()
    (shm / "before-the-server").write_text("not the server's to remove")
    environ = {"ENVREG_RECYCLE": "1", "TMPDIR": str(scratch), "ENVREG_RECYCLE_SHM": str(shm)}
    proc = EnvServerProcess(str(folder), image_entry=True, environ=environ).start()
    yield proc
    proc.stop()


def remember(server: EnvServerProcess, word: str) -> list[str]:
    body, headers = modern_request("tools/call", {"name": "remember", "arguments": {"word": word}})
    response = http_request("POST", f"{server.url}/mcp", json=body, headers=headers)
    return response.json()["result"]["structuredContent"]["result"]


def health(server: EnvServerProcess) -> dict:
    return http_request("GET", f"{server.control_url}/healthz", headers=server.auth).json()


def recycle(server: EnvServerProcess) -> None:
    """Ask for a fresh process and wait until it answers, as the runtime does (`DockerBackend.recycle`): a
    poll that the ending child accepted and then closed unanswered is a "not yet"."""
    response = http_request("POST", f"{server.control_url}/recycle", headers=server.auth)
    assert response.status_code == 202, response.text
    before = response.json()["generation"]
    deadline = time.monotonic() + 10
    while True:
        with contextlib.suppress(httpx2.TransportError):
            if health(server)["generation"] != before:
                return
        assert time.monotonic() < deadline, "no fresh process in 10 s"
        time.sleep(0.01)


def test_a_recycled_server_keeps_nothing_of_the_last_sandbox(server: EnvServerProcess) -> None:
    assert remember(server, "secret") == ["secret"]
    server.new_instance()
    scratch = Path(server.environ["TMPDIR"])
    (scratch / "left-behind.txt").write_text("from the last sandbox")
    (scratch / "folder").mkdir()
    (scratch / "folder" / "inside").write_text("x")
    assert health(server)["generation"] == 0

    recycle(server)

    after = health(server)
    assert after.pop("sessions")["open"] == 0, "an MCP session of the last sandbox is still open"
    states = after.pop("states")
    assert 0 < states["bytes"] < 1024 and states["budget"] > 0, "only the seed's state is held"
    assert after == {
        "status": "ok",
        "env": "leaky",
        "version": "1.0.0",
        "instances": 1,
        "generation": 1,
    }
    assert remember(server, "next") == ["next"]  # the module global is as imported
    listed = http_request("GET", f"{server.control_url}/instances", headers=server.auth).json()["instances"]
    assert [i["id"] for i in listed] == ["default"]
    assert list(scratch.iterdir()) == []
    recycle(server)
    assert health(server)["generation"] == 2 and server.proc.poll() is None


def test_a_recycle_leaves_no_locked_folder_shared_memory_or_process_behind(server: EnvServerProcess) -> None:
    shm = Path(server.environ["ENVREG_RECYCLE_SHM"])
    body, headers = modern_request("tools/call", {"name": "litter", "arguments": {"shm": str(shm)}})
    answer = http_request("POST", f"{server.url}/mcp", json=body, headers=headers).json()["result"]
    stray = answer["structuredContent"]["result"]
    os.kill(stray, 0)  # it runs, outside the server's process group
    assert (shm / "envreg-litter").exists()

    recycle(server)

    scratch = Path(server.environ["TMPDIR"])
    assert list(scratch.iterdir()) == []
    assert sorted(p.name for p in shm.iterdir()) == ["before-the-server"]
    with pytest.raises(ProcessLookupError):
        os.kill(stray, 0)


def test_a_server_dying_otherwise_ends_the_parent_with_its_status(server: EnvServerProcess) -> None:
    children = subprocess.run(["pgrep", "-P", str(server.proc.pid)], capture_output=True, text=True)
    (child,) = [int(pid) for pid in children.stdout.split()]
    os.kill(child, signal.SIGKILL)
    assert server.proc.wait(10) == 128 + signal.SIGKILL


@pytest.mark.parametrize("delay", [0, 0.001, 0.003, 0.01])
def test_a_stop_during_a_recycle_starts_no_new_process(server: EnvServerProcess, delay: float) -> None:
    """The signal lands while the child ends, while the parent empties the temp folder, or once the
    next child runs: the server stops each time, with the signal's status."""
    assert http_request("POST", f"{server.control_url}/recycle", headers=server.auth).status_code == 202
    time.sleep(delay)
    server.proc.send_signal(signal.SIGTERM)
    assert server.proc.wait(10) == 128 + signal.SIGTERM


def test_a_server_started_without_recycling_refuses_it() -> None:
    proc = EnvServerProcess("tests/fixtures/counter", image_entry=True).start()
    try:
        response = http_request("POST", f"{proc.control_url}/recycle", headers=proc.auth)
        assert response.status_code == 409 and "ENVREG_RECYCLE=1" in response.json()["error"]
        assert http_request("POST", f"{proc.control_url}/recycle").status_code == 401
    finally:
        proc.stop()


def test_the_parent_builds_what_each_child_would_build_on_its_first_calls(tmp_path: Path) -> None:
    """A plain server builds a tool's models on first use; a recyclable one builds them all before it
    forks, so that no child pays for them."""
    from envreg.env import load_environment
    from envreg.server.recycle import prepare

    (tmp_path / "env.py").write_text(LEAKY_ENV)
    env = load_environment(tmp_path)
    assert all(tool.built is None for tool in env.tools.values())
    prepare(env)
    assert all(tool.built is not None for tool in env.tools.values())
