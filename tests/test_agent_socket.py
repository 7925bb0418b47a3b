"""The agent plane on a Unix socket: the server's side (`--agent-socket`, ``ENVREG_AGENT_SOCKET``) and the
folders the Docker backend shares with containers for it (`docker_sockets`: sealed before anything in
them is trusted, removed with their container, swept by `envreg gc`)."""

from __future__ import annotations

import errno
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx2
import pytest
from conftest import COUNTER
from servers import EnvServerProcess, free_port, modern_request

from envreg.runtime.backends.docker_sockets import SOCKET_NAME, SocketFolders, collect, seal, socket_root
from envreg.server.listen import listen_unix

as_root = pytest.mark.skipif(os.geteuid() != 0, reason="socket folders are a root runtime's")


def tools_list(client: httpx2.Client, url: str, token: str) -> httpx2.Response:
    body, headers = modern_request("tools/list")
    return client.post(url, json=body, headers={**headers, "authorization": f"Bearer {token}"})


@pytest.mark.parametrize("image_entry", [False, True], ids=["serve-env", "image entry"])
def test_the_agent_plane_answers_on_its_socket_as_on_its_port(tmp_path: Path, image_entry: bool) -> None:
    path = tmp_path / "agent.sock"
    server = EnvServerProcess(
        COUNTER,
        extra=["--agent-token=a"],
        environ={"ENVREG_AGENT_SOCKET": str(path)},
        image_entry=image_entry,
    ).start()
    try:
        assert stat.S_ISSOCK(path.lstat().st_mode)
        with httpx2.Client(transport=httpx2.HTTPTransport(uds=str(path))) as unix, httpx2.Client() as tcp:
            via_socket = tools_list(unix, f"{server.url}/mcp", "a")
            via_port = tools_list(tcp, f"{server.url}/mcp", "a")
            refused = tools_list(unix, f"{server.url}/mcp", "wrong")
        assert via_socket.status_code == via_port.status_code == 200
        assert via_socket.json() == via_port.json()
        assert refused.status_code == 401  # the same agent plane: its token is required there too
    finally:
        server.stop()


def test_a_socket_that_cannot_be_had_is_a_warning_and_the_port_still_serves(tmp_path: Path) -> None:
    path = tmp_path / "missing" / "agent.sock"
    port, control = free_port(), free_port()
    cmd = [sys.executable, "-m", "envreg.server", COUNTER, "--token", "t", "--agent-token", "a"]
    cmd += ["--agent-socket", str(path)]
    proc = subprocess.Popen(
        [*cmd, "--port", str(port), "--control-port", str(control)], stderr=subprocess.PIPE, text=True
    )
    try:
        deadline, up = time.monotonic() + 60, False
        while not up and time.monotonic() < deadline and proc.poll() is None:
            try:
                with httpx2.Client() as tcp:
                    up = tools_list(tcp, f"http://127.0.0.1:{port}/mcp", "a").status_code == 200
            except httpx2.TransportError:
                time.sleep(0.05)
        assert up, "the server did not serve its port"
    finally:
        proc.terminate()
        _, stderr = proc.communicate(timeout=30)
    assert f"not serving the agent plane on {path}: No such file or directory" in stderr
    assert "its port still serves it" in stderr and "Traceback" not in stderr


def test_a_stale_socket_is_replaced_but_not_a_live_one_nor_a_file(tmp_path: Path) -> None:
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(tmp_path / "s"))
    stale.close()  # its file stays, nobody answers there
    sock = listen_unix(str(tmp_path / "s"))
    assert sock is not None
    assert listen_unix(str(tmp_path / "s")) is None  # another server serves there: left to it
    with socket.socket(socket.AF_UNIX) as client:
        client.connect(str(tmp_path / "s"))
        assert sock.accept()[0] is not None
    sock.close()
    (tmp_path / "f").write_text("keep")
    assert listen_unix(str(tmp_path / "f")) is None
    assert (tmp_path / "f").read_text() == "keep"


# socket folders -----------------------------------------------------------------------------------
@as_root
def test_the_socket_root_is_refused_when_another_user_could_enter_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = socket_root(tmp_path)
    assert root == tmp_path / "envreg-0" and stat.S_IMODE(root.stat().st_mode) == 0o700
    root.chmod(0o755)
    assert socket_root(tmp_path) is None
    root.rmdir()
    (tmp_path / "elsewhere").mkdir(mode=0o700)
    root.symlink_to(tmp_path / "elsewhere")  # anyone may make names in /dev/shm
    assert socket_root(tmp_path) is None
    root.unlink()
    root.mkdir(mode=0o700)
    os.chown(root, 1000, 1000)
    assert socket_root(tmp_path) is None
    root.rmdir()

    def full(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(Path, "mkdir", full)  # a /dev/shm that is full: no sockets, and no failed start
    assert socket_root(tmp_path) is None


@as_root
def test_a_sealed_folder_is_trusted_only_for_a_socket(tmp_path: Path) -> None:
    folders = SocketFolders(tmp_path, "rt_test")
    real = tmp_path / "host.sock"  # a socket elsewhere on the host: a link to it must not be followed
    host = socket.socket(socket.AF_UNIX)
    host.bind(str(real))
    cases = {
        "socket": lambda p: socket.socket(socket.AF_UNIX).bind(str(p)),
        "link": lambda p: p.symlink_to(real),
        "file": lambda p: p.write_text(""),
        "fifo": lambda p: os.mkfifo(p),
        "nothing": lambda p: None,
    }
    for lease, make in cases.items():
        folder = folders.make(lease)
        assert stat.S_IMODE(folder.stat().st_mode) == 0o777
        make(folder / SOCKET_NAME)
        (folder / "kept-for-the-next-sandbox").mkdir()  # what a container made there goes at the seal
        (folder / "kept-for-the-next-sandbox" / "state.json").write_text("{}")
        (folder / "note").write_text("")
        (folder / "away").symlink_to(tmp_path)  # (removed, never followed)
        found = seal(folder)
        assert stat.S_IMODE(folder.stat().st_mode) == 0o555
        assert found == (str(folder / SOCKET_NAME) if lease == "socket" else None), lease
        assert os.listdir(folder) == ([] if lease == "nothing" else [SOCKET_NAME]), lease
    assert real.exists() and (tmp_path / "rt_test").exists()
    host.close()
    folders.remove("socket")
    assert not (tmp_path / "rt_test" / "socket").exists()
    folders.close()
    assert not (tmp_path / "rt_test").exists()


@as_root
def test_a_sealed_folder_cannot_be_changed_by_its_container_user() -> None:
    base = Path(tempfile.mkdtemp(dir="/dev/shm"))  # pytest's tmp_path is closed to other users
    try:
        base.chmod(0o755)
        folder = SocketFolders(base, "rt_test").make("ls_1")
        (base / "rt_test").chmod(0o755)
        code = (
            "import os, socket, sys; os.setgid(65534); os.setuid(65534)\n"
            "for do in (lambda: open(sys.argv[1] + '/file', 'w'), "
            "lambda: socket.socket(socket.AF_UNIX).bind(sys.argv[1] + '/' + sys.argv[2])):\n"
            "    try: do(); print('wrote')\n"
            "    except PermissionError: print('refused')\n"
        )

        def as_nobody(name: str) -> list[str]:
            run = ["/usr/bin/python3", "-c", code, str(folder), name]  # (this venv is under /root)
            done = subprocess.run(run, capture_output=True, text=True, timeout=60, cwd="/", env={})
            assert done.returncode == 0, done.stderr
            return done.stdout.split()

        assert as_nobody(SOCKET_NAME) == ["wrote", "wrote"]  # the container's user can bind there...
        assert seal(folder) == str(folder / SOCKET_NAME)
        assert os.listdir(folder) == [SOCKET_NAME]  # (the file it wrote is gone)
        assert as_nobody("other.sock") == ["refused", "refused"]  # ...until the folder is sealed
        assert os.listdir(folder) == [SOCKET_NAME]
    finally:
        shutil.rmtree(base)


@as_root
def test_collect_removes_the_folders_nobody_owns(tmp_path: Path) -> None:
    for runtime in ("rt_alive", "rt_gone"):
        folder = SocketFolders(tmp_path, runtime).make("ls_1")
        (folder / "sub").mkdir()
        seal(folder)
    owned = lambda runtime, created: runtime == "rt_alive"  # noqa: E731
    assert collect(tmp_path, owned, dry_run=True) == [str(tmp_path / "rt_gone")]
    assert (tmp_path / "rt_gone").exists()
    assert collect(tmp_path, owned) == [str(tmp_path / "rt_gone")]
    assert sorted(os.listdir(tmp_path)) == ["rt_alive"]
    assert collect(None, owned) == []
