"""Foreign code runs only in a container sandbox: the mechanism (`envreg.sandboxing`) and `envreg import envfactory`."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from conftest import FIXTURES, ROOT
from typer.testing import CliRunner

from envreg.cli.main import app
from envreg.sandboxing import SandboxFailed, run_isolated

pytestmark = pytest.mark.docker
runner = CliRunner()
EF = FIXTURES / "envfactory"


@pytest.fixture(scope="session")
def base_image(docker_engine) -> str:
    """The base image the sandboxes run (`envreg build` makes it with any environment)."""
    from envreg.sandboxing import default_image

    image = default_image()
    if subprocess.run(["docker", "image", "inspect", image], capture_output=True).returncode != 0:
        proc = subprocess.run(
            [sys.executable, "-m", "envreg.cli.main", "build", "--force", "calendar"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=1800,
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
    return image


class Listener:
    """A TCP server on the host's loopback that counts the connections it gets."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            conn.close()


def test_the_sandbox_is_hardened_and_has_no_network(base_image: str) -> None:
    facts = run_isolated(
        "envreg.sandboxing:facts",
        {"connect": [["1.1.1.1", 53], ["172.17.0.1", 2375]]},
        files={"given/file.txt": b"data"},
    )
    assert facts["uid"] == facts["gid"] == 65534
    assert facts["root_writable"] is False and facts["interfaces"] == ["lo"]
    assert facts["files"] == ["given/file.txt"]
    assert all(v.startswith("refused") for v in facts["connect"].values()), facts["connect"]


def test_what_raises_and_what_runs_too_long_are_clear_errors(base_image: str) -> None:
    with pytest.raises(
        SandboxFailed, match=r"failed in its sandbox: ModuleNotFoundError: No module named 'envreg\.nope'"
    ):
        run_isolated("envreg.nope:f")
    with pytest.raises(ValueError, match="must be a relative path"):
        run_isolated("envreg.sandboxing:facts", files={"../escape": b""})


def test_a_tool_file_is_inspected_in_the_sandbox_and_never_runs_on_the_host(
    base_image: str, tmp_path: Path
) -> None:
    """The file writes a marker and starts a subprocess that connects to a listener on the host's loopback,
    as it is imported: neither reaches this host (the import itself goes on)."""
    listener = Listener()
    marker = tmp_path / "ran-on-the-host"
    hostile = (
        (EF / "bookings_tools.py")
        .read_text()
        .replace(
            "mcp = FastMCP(",
            "import pathlib, subprocess, sys\n"
            f"try:\n    pathlib.Path({str(marker)!r}).write_text('x')\nexcept OSError:\n    pass\n"
            f"subprocess.run([sys.executable, '-c', 'import socket; socket.create_connection((\"127.0.0.1\", {listener.port}), 2)'])\n"
            "mcp = FastMCP(",
            1,
        )
    )
    tool = tmp_path / "bookings_tools.py"
    tool.write_text(hostile)
    images = tmp_path / "images"
    result = runner.invoke(
        app,
        [
            "import",
            "envfactory",
            str(tool),
            "--metadata",
            str(EF / "bookings_tools.json"),
            "--seed",
            str(EF / "bookings_seed.json"),
            "--name",
            "bookings",
            "--images",
            str(images),
        ],
    )
    flat = " ".join(result.output.split())
    assert result.exit_code == 0, result.output
    assert "imported BookingAPI (the object `api` its tools call)" in flat
    assert not marker.exists(), "the file's import ran on the host"
    assert listener.connections == 0, "a subprocess of the file reached the host"
    folder = images / "bookings"
    assert (folder / "bookings_tools.py").read_bytes() == tool.read_bytes()
    recorded = json.loads((folder / "scenarios" / "recorded_from_seed.json").read_text())
    assert [s["tool"] for s in recorded["steps"]] == ["login", "find_hotels", "book", "cancel"]


def test_an_import_that_runs_past_its_timeout_is_stopped(base_image: str, tmp_path: Path) -> None:
    tool = tmp_path / "spin_tools.py"
    tool.write_text("while True:\n    pass\n")
    result = runner.invoke(
        app,
        [
            "import",
            "envfactory",
            str(tool),
            "--metadata",
            str(EF / "bookings_tools.json"),
            "--name",
            "spin",
            "--images",
            str(tmp_path / "images"),
            "--timeout",
            "5",
        ],
    )
    assert result.exit_code == 1
    assert "ran past 5 s in its sandbox and was stopped" in " ".join(result.output.split())
    assert not (tmp_path / "images").exists()


@pytest.mark.slow
def test_an_imported_file_builds_into_an_image_that_envreg_validate_passes(
    base_image: str, tmp_path: Path
) -> None:
    """import (sandbox) -> manifest (sandbox) -> build -> validate: the recorded scenario runs in the image."""
    images, manifests = tmp_path / "images", tmp_path / "manifests"
    name = f"bookings-{os.getpid()}"
    env = {**os.environ, "ENVREG_IMAGES": str(images), "ENVREG_MANIFESTS": str(manifests)}

    def envreg(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "envreg.cli.main", *args],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=1800,
        )

    done = envreg(
        "import",
        "envfactory",
        str(EF / "bookings_tools.py"),
        "--metadata",
        str(EF / "bookings_tools.json"),
        "--seed",
        str(EF / "bookings_seed.json"),
        "--name",
        name,
        "--images",
        str(images),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    done = envreg("manifest", name, "--out", str(manifests))
    assert done.returncode == 0, done.stdout + done.stderr
    manifest = json.loads((manifests / f"{name}.json").read_text())
    assert [t["name"] for t in manifest["tools"]] == ["login", "find_hotels", "book", "cancel"]
    assert manifest["scenarios"] == 1
    done = envreg("build", "--force", "--progress", "plain", name)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    done = envreg("validate", name)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
