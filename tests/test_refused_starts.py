"""A server that cannot start says why in one error and its hint, never a traceback: a taken port (exit 3)
from every server envreg starts, a missing environment from the image entry."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import COUNTER
from servers import free_port

from envreg.server.listen import LISTEN_EXIT, CannotListen, listen, listen_all


@pytest.fixture
def taken() -> Iterator[int]:
    """A port something else listens on."""
    with socket.create_server(("127.0.0.1", 0)) as holder:
        yield holder.getsockname()[1]


def test_listen_all_releases_what_it_bound_when_a_later_port_is_taken(taken: int) -> None:
    first = free_port()
    with pytest.raises(CannotListen) as caught:
        listen_all("127.0.0.1", (first, taken))
    assert f"cannot listen on 127.0.0.1:{taken}" in caught.value.message
    listen("127.0.0.1", first).close()  # the first port was given back


ENTRIES = {
    "serve-env": ["envreg.cli.main", "serve-env"],
    "image entry": ["envreg.server"],
    "image entry, recyclable": ["envreg.server"],
}


@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize("plane", ["agent", "control"])
def test_an_environment_server_on_a_taken_port_says_so_and_exits_3(
    taken: int, entry: str, plane: str
) -> None:
    ports = {"agent": free_port(), "control": free_port(), plane: taken}
    cmd = [sys.executable, "-m", *ENTRIES[entry], COUNTER, "--token", "t"]
    cmd += ["--port", str(ports["agent"]), "--control-port", str(ports["control"])]
    environ = {**os.environ, "ENVREG_RECYCLE": "1" if "recyclable" in entry else "0"}
    done = subprocess.run(cmd, env=environ, capture_output=True, text=True, timeout=120)
    assert done.returncode == LISTEN_EXIT, done.stderr
    assert f"cannot listen on 127.0.0.1:{taken}" in done.stderr
    assert "pick another" in done.stderr
    assert "Traceback" not in done.stderr


SERVICES = {"daemon": ["serve", "--token", "t"], "reward serve": ["reward", "serve"]}


@pytest.mark.parametrize("service", SERVICES)
def test_a_service_on_a_taken_port_says_so_and_exits_3(taken: int, tmp_path: Path, service: str) -> None:
    pytest.importorskip("fastapi")
    cmd = [sys.executable, "-m", "envreg.cli.main", *SERVICES[service], "--port", str(taken)]
    environ = {**os.environ, "ENVREG_HOME": str(tmp_path), "ENVREG_REWARD_TOKEN": "t"}
    done = subprocess.run(cmd, env=environ, capture_output=True, text=True, timeout=120)
    assert done.returncode == LISTEN_EXIT, done.stderr
    assert f"cannot listen on 127.0.0.1:{taken}" in done.stderr
    assert "pick another --port" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "daemon.json").exists()


def test_the_image_entry_names_a_missing_environment(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "envreg.server", str(tmp_path / "nothing"), "--token", "t"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    assert f"error: no environment '{tmp_path / 'nothing'}'" in done.stderr
    assert "Traceback" not in done.stderr
