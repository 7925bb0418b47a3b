"""`envreg gc` after a crashed runtime; `envreg run` / `ps` / `stop` against a daemon and in the foreground."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from daemon_helpers import DaemonProcess
from mcp_helpers import mcp_client

from envreg.http.client import request as http_request

pytestmark = pytest.mark.docker
# `envreg gc --grace 0` removes every ended runtime's leftovers, another test's included: one worker runs them
gc_group = pytest.mark.xdist_group("gc")


def envreg(home: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ENVREG_HOME": str(home)}
    env.pop("ENVREG_DAEMON_URL", None)
    return subprocess.run(
        [sys.executable, "-m", "envreg.cli.main", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def docker_ids(kind: str, label: str) -> list[str]:
    cmd = ["docker", "ps", "-a"] if kind == "container" else ["docker", "network", "ls"]
    out = subprocess.run(
        [*cmd, "-q", "--filter", f"label={label}"], capture_output=True, text=True, check=True
    )
    return out.stdout.split()


CRASHING_RUNTIME = textwrap.dedent(
    """
    import anyio
    from envreg.runtime import Runtime

    async def main():
        async with Runtime(gateway=False) as rt:
            for _ in range(3):
                await rt.sandbox("calendar", isolation="container")
            await rt.sandbox("calendar", isolation="instance")
            print(rt.id, "ready", flush=True)
            await anyio.sleep(600)

    anyio.run(main)
    """
)


def start_runtime(home: Path, *wrapper: str) -> tuple[subprocess.Popen[str], str]:
    """A runtime in another process (optionally under `wrapper`, e.g. in its own pid namespace)."""
    proc = subprocess.Popen(
        [*wrapper, sys.executable, "-c", CRASHING_RUNTIME],
        env={**os.environ, "ENVREG_HOME": str(home)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    line = proc.stdout.readline()
    if not line.endswith("ready\n"):
        proc.kill()
        raise AssertionError(line + proc.stderr.read())
    return proc, f"io.envreg.runtime={line.split()[0]}"


def keeper_stopped(label: str) -> bool:
    out = subprocess.run(
        [
            "docker",
            "ps",
            "-a",
            "--filter",
            f"label={label}",
            "--filter",
            "label=io.envreg.keeper",
            "--format",
            "{{.State}}",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip() in ("exited", "")


def wait_for_keeper_to_stop(label: str, timeout: float = 10) -> None:
    """The keeper of a runtime that was killed exits once the engine closes its stdin."""
    deadline = time.monotonic() + timeout
    while not keeper_stopped(label) and time.monotonic() < deadline:
        time.sleep(0.1)


@gc_group
def test_gc_removes_what_a_killed_runtime_left(tmp_path: Path) -> None:
    proc, label = start_runtime(tmp_path)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    # 3 own containers + 1 shared by instances + the runtime's keeper
    assert len(docker_ids("container", label)) == 5
    assert len(docker_ids("network", label)) == 1
    wait_for_keeper_to_stop(label)
    assert keeper_stopped(label), "the keeper outlived its runtime's connection"
    within_grace = envreg(tmp_path, "gc")  # gone for less than the grace period: left alone, and said so
    runtime = label.split("=")[1]
    assert within_grace.returncode == 0, within_grace.stderr
    assert f"kept 5 container(s) and 1 network(s) of runtime {runtime}" in within_grace.stdout
    assert "gc removes them from" in within_grace.stdout and "--grace 0" in within_grace.stdout
    assert "nothing to remove" not in within_grace.stdout
    assert len(docker_ids("container", label)) == 5
    folder = Path(f"/dev/shm/envreg-0/{runtime}")  # its containers' agent-socket folders (a root runtime's)
    assert os.geteuid() != 0 or len(os.listdir(folder)) == 4
    result = envreg(tmp_path, "gc", "--grace", "0")
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("removed container") >= 5 and "removed network" in result.stdout
    assert docker_ids("container", label) == []
    assert docker_ids("network", label) == []
    assert not folder.exists()
    assert os.geteuid() != 0 or f"removed socket folder {folder}" in result.stdout
    again = envreg(tmp_path, "gc", "--grace", "0")  # nothing of that runtime is left to remove
    assert again.returncode == 0 and label.split("=")[1] not in again.stdout


@gc_group
@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root and unshare")
def test_gc_leaves_a_live_runtime_in_another_pid_namespace_alone(tmp_path: Path) -> None:
    """A runtime in another container or host is invisible in this host's process table: its keeper
    tells that it lives."""
    proc, label = start_runtime(tmp_path, "unshare", "--pid", "--fork", "--mount-proc", "--kill-child")
    try:
        assert envreg(tmp_path, "gc", "--grace", "0").returncode == 0
        assert len(docker_ids("container", label)) == 5, "gc removed a live runtime's sandboxes"
    finally:
        proc.kill()
        proc.wait()
    wait_for_keeper_to_stop(label)
    assert envreg(tmp_path, "gc", "--grace", "0").returncode == 0
    assert docker_ids("container", label) == [] and docker_ids("network", label) == []


def keeper_of(label: str) -> str:
    out = subprocess.run(
        ["docker", "ps", "-a", "-q", "--filter", f"label={label}", "--filter", "label=io.envreg.keeper"],
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip()


@gc_group
def test_gc_counts_a_paused_keeper_as_alive(tmp_path: Path) -> None:
    proc, label = start_runtime(tmp_path)
    keeper = keeper_of(label)
    try:
        subprocess.run(["docker", "pause", keeper], check=True, capture_output=True)
        result = envreg(tmp_path, "gc", "--grace", "0")
        assert result.returncode == 0, result.stderr
        assert len(docker_ids("container", label)) == 5, "gc removed a live runtime's sandboxes"
        assert len(docker_ids("network", label)) == 1
    finally:
        subprocess.run(["docker", "unpause", keeper], capture_output=True)
        proc.kill()
        proc.wait()
    envreg(tmp_path, "gc", "--grace", "0")


def replaced(label: str, first: str) -> bool:
    """One keeper, not `first`, and it runs (the dead one is kept, renamed, until its successor started)."""
    ids = keeper_of(label).split()
    return len(ids) == 1 and ids[0] != first and not keeper_stopped(label)


@gc_group
def test_a_runtime_starts_its_keeper_again_when_it_dies(tmp_path: Path) -> None:
    proc, label = start_runtime(tmp_path)
    try:
        first = keeper_of(label)
        subprocess.run(["docker", "kill", first], check=True, capture_output=True)
        deadline = time.monotonic() + 20
        while not replaced(label, first) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert replaced(label, first), "no new keeper runs in place of the dead one"
        result = envreg(tmp_path, "gc", "--grace", "0")
        assert result.returncode == 0, result.stderr
        assert len(docker_ids("container", label)) == 5, "gc removed a live runtime's sandboxes"
    finally:
        proc.kill()
        proc.wait()
    wait_for_keeper_to_stop(label)
    assert envreg(tmp_path, "gc", "--grace", "0").returncode == 0
    assert docker_ids("container", label) == [] and docker_ids("network", label) == []


@gc_group
@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("iptables"), reason="needs root and iptables")
def test_gc_removes_a_network_that_still_has_endpoints_and_a_rule_without_its_network(tmp_path: Path) -> None:
    proc, label = start_runtime(tmp_path)
    proc.kill()
    proc.wait()
    network = docker_ids("network", label)[0]
    name = subprocess.run(
        ["docker", "network", "inspect", "-f", "{{.Name}}", network],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    # something else holds the dead runtime's network: the engine refuses to remove it while it is attached
    squatter = subprocess.run(
        ["docker", "create", "--network", name, "--label", "envreg-test-squatter=1",
         "--entrypoint", "sleep", "envreg/base:latest", "600"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    # and the firewall rule of a network that is already gone
    orphan = "envreg-rt_0rphan" + os.urandom(3).hex()
    rule = ["INPUT", "-i", "er-orphan", "-m", "comment", "--comment", orphan, "-j", "REJECT"]
    subprocess.run(["iptables", "-w", "-I", *rule], check=True)
    try:
        subprocess.run(["docker", "start", squatter], check=True, capture_output=True)
        result = envreg(tmp_path, "gc", "--grace", "0")
        assert result.returncode == 0, result.stderr
        assert f"removed network {name}" in result.stdout
        assert docker_ids("network", label) == []
        rules = subprocess.run(["iptables", "-w", "-S", "INPUT"], capture_output=True, text=True).stdout
        assert name not in rules and orphan not in rules
    finally:
        subprocess.run(["docker", "rm", "-f", squatter], capture_output=True)
        subprocess.run(["iptables", "-w", "-D", *rule], capture_output=True)


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[DaemonProcess]:
    proc = DaemonProcess(tmp_path).start()
    yield proc
    proc.stop()


def test_no_daemon_says_how_to_start_one(tmp_path: Path) -> None:
    for args in (["ps"], ["stop", "sb_x"], ["run", "calendar", "--detach"]):
        result = envreg(tmp_path, *args)
        assert result.returncode == 1, result
        assert "error: no envreg daemon is running" in result.stderr and "envreg serve" in result.stderr
    # a daemon.json left by a dead daemon is not mistaken for a live one
    (tmp_path / "daemon.json").write_text(
        json.dumps({"url": "http://127.0.0.1:1", "token": "t", "pid": 2**22 + 1})
    )
    result = envreg(tmp_path, "ps")
    assert result.returncode == 1 and "has exited" in result.stderr


def test_run_detach_ps_stop(daemon: DaemonProcess, tmp_path: Path) -> None:
    result = envreg(daemon.home, "run", "calendar", "--detach", "--isolation", "instance", "--json")
    assert result.returncode == 0, result.stderr
    sb = json.loads(result.stdout)
    assert sb["mcp_url"].startswith(daemon.url) and sb["token"]
    human = envreg(daemon.home, "run", "calendar", "-d", "--ttl", "120")
    assert human.returncode == 0, human.stderr
    assert "MCP URL" in human.stdout and "Authorization: Bearer" in human.stdout
    second = next(line.split()[1] for line in human.stdout.splitlines() if line.startswith("sandbox"))

    listing = envreg(daemon.home, "ps")
    assert listing.returncode == 0, listing.stderr
    assert "SANDBOX ID" in listing.stdout and sb["id"] in listing.stdout and sb["mcp_url"] in listing.stdout
    assert second in listing.stdout and "container" in listing.stdout and "in 1m" in listing.stdout
    assert set(envreg(daemon.home, "ps", "-q").stdout.split()) == {sb["id"], second}

    # gc leaves a live daemon's containers alone
    runtime = daemon.ok("GET", "/v1/healthz")["runtime"]
    assert envreg(daemon.home, "gc").returncode == 0
    assert docker_ids("container", f"io.envreg.runtime={runtime}")
    assert daemon.ok("POST", f"/v1/sandboxes/{second}/call", {"name": "list_calendars"})["isError"] is False

    stopped = envreg(daemon.home, "stop", sb["id"], second, "sb_nope")
    assert stopped.returncode == 1
    assert stopped.stdout.split() == [sb["id"], second]
    assert "no sandbox 'sb_nope'" in stopped.stderr
    assert envreg(daemon.home, "ps", "-q").stdout.split() == []
    assert (
        http_request(
            "POST", sb["mcp_url"], json={}, headers={"authorization": f"Bearer {sb['token']}"}
        ).status_code
        == 404
    )


def test_run_detach_with_a_state_file(daemon: DaemonProcess, tmp_path: Path) -> None:
    seed = json.loads((Path(os.environ["ENVREG_IMAGES"]) / "calendar" / "seed.json").read_text())
    seed["owner"]["name"] = "Sam Lee"
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text(json.dumps(seed))
    bad.write_text(json.dumps({**seed, "calendars": 3}))
    result = envreg(
        daemon.home, "run", "calendar", "-d", "--isolation", "instance", "--state", str(good), "--json"
    )
    assert result.returncode == 0, result.stderr
    sb = json.loads(result.stdout)
    assert daemon.ok("GET", f"/v1/sandboxes/{sb['id']}/state")["state"]["owner"]["name"] == "Sam Lee"
    refused = envreg(daemon.home, "run", "calendar", "-d", "--isolation", "instance", "--state", str(bad))
    assert refused.returncode == 1 and "invalid state" in refused.stderr and "calendars" in refused.stderr
    assert [s["id"] for s in daemon.ok("GET", "/v1/sandboxes")] == [sb["id"]]
    missing = envreg(daemon.home, "run", "calendar", "-d", "--state", str(tmp_path / "nope.json"))
    assert missing.returncode == 1 and "cannot read --state" in missing.stderr


@pytest.mark.anyio
async def test_run_in_the_foreground_until_ctrl_c(tmp_path: Path) -> None:
    env = {**os.environ, "ENVREG_HOME": str(tmp_path)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "envreg.cli.main", "run", "calendar", "--isolation", "container", "--json"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        assert line, proc.stderr.read() if proc.poll() is not None else "no output"
        sb = json.loads(line)
        async with mcp_client(sb["mcp_url"], "2025-11-25", token=sb["token"]) as client:
            result = await client.call_tool("list_calendars", {})
            assert not result.is_error
        label = f"io.envreg.runtime={sb['runtime']}"
        assert len(docker_ids("container", label)) == 2  # the sandbox's container and the runtime's keeper
        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 0, proc.stderr.read()
        assert f"removed sandbox {sb['id']}" in proc.stderr.read()
        deadline = time.monotonic() + 10
        while docker_ids("container", label) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert docker_ids("container", label) == [] and docker_ids("network", label) == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@gc_group
def test_gc_takes_a_container_removed_while_it_lists_as_already_gone() -> None:
    """Another runtime (or gc) may remove a container between gc's listing and its inspection of it: gc
    counts it as gone and goes on with the rest (it raised docker's NotFound, 'a bug in envreg')."""
    import docker

    from envreg.protocol import MANAGED_LABEL, RUNTIME_LABEL
    from envreg.runtime.backends.docker_keeper import collect_garbage

    runtime = "rt_race" + os.urandom(3).hex()
    labels = ["--label", f"{MANAGED_LABEL}=true", "--label", f"{RUNTIME_LABEL}={runtime}"]
    made = [
        subprocess.run(
            ["docker", "create", *labels, "--entrypoint", "sleep", "envreg/base:latest", "600"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        for _ in range(2)
    ]
    client = docker.from_env()
    inspect = client.api.inspect_container
    vanished: list[str] = []

    def removed_meanwhile(container: str) -> dict:
        if not vanished and container in made:  # the first of them goes away just before gc looks at it
            vanished.append(container)
            subprocess.run(["docker", "rm", "-f", container], capture_output=True, check=True)
        return inspect(container)

    client.api.inspect_container = removed_meanwhile  # type: ignore[method-assign]
    try:
        garbage = collect_garbage(client, grace=0)
    finally:
        subprocess.run(["docker", "rm", "-f", *made], capture_output=True)
    assert vanished and garbage.failed == []
    other = next(c for c in made if c not in vanished)
    assert client.api.containers(all=True, filters={"id": other}) == [], "the rest is still collected"


@gc_group
def test_gc_sees_a_keeper_at_every_step_of_its_restart(monkeypatch: pytest.MonkeyPatch) -> None:
    """A runtime whose keeper died starts another: gc, run at the moment the new keeper is created, must still
    count the runtime as alive or within its grace. The dead keeper used to be removed first, and a runtime
    with no keeper at all counts as gone since each container's creation: gc took its sandboxes."""
    import docker
    from docker.models.containers import ContainerCollection

    from envreg.protocol import KEEPER_LABEL, MANAGED_LABEL, RUNTIME_LABEL
    from envreg.runtime.backends.docker_keeper import Garbage, Keeper, collect_garbage

    runtime = "rt_restart" + os.urandom(3).hex()
    client = docker.from_env()
    keeper = Keeper(client, runtime, "envreg/base:latest", {MANAGED_LABEL: "true", RUNTIME_LABEL: runtime})
    sandbox = f"envreg-test-{runtime}"
    subprocess.run(
        ["docker", "create", "--name", sandbox, *_runtime_labels(runtime), "--entrypoint", "sleep",
         "envreg/base:latest", "600"],
        capture_output=True, check=True,
    )  # fmt: skip
    passes: list[Garbage] = []
    creating = ContainerCollection.create

    def gc_then_create(self, *args, **kwargs):
        passes.append(collect_garbage(client, grace=1, dry_run=True))
        return creating(self, *args, **kwargs)

    try:
        time.sleep(1.5)  # the sandbox is older than gc's grace
        monkeypatch.setattr(ContainerCollection, "create", gc_then_create)
        subprocess.run(["docker", "kill", keeper.container.id], capture_output=True, check=True)
        deadline = time.monotonic() + 30
        while keeper.restarts == 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert keeper.restarts == 1 and passes, "the keeper was not started again"
        assert all(sandbox not in g.containers for g in passes), "gc would take a live runtime's sandbox"
        keepers = client.containers.list(all=True, filters={"label": f"{KEEPER_LABEL}={runtime}"})
        assert [(k.id, k.status) for k in keepers] == [(keeper.container.id, "running")], (
            "the dead one is left"
        )
    finally:
        keeper.close()
        subprocess.run(["docker", "rm", "-f", sandbox], capture_output=True)
        client.close()


def _runtime_labels(runtime: str) -> list[str]:
    from envreg.protocol import MANAGED_LABEL, RUNTIME_LABEL

    return ["--label", f"{MANAGED_LABEL}=true", "--label", f"{RUNTIME_LABEL}={runtime}"]


def _keeper(runtime: str, *, start: bool) -> str:
    """A keeper of `runtime` as `Keeper` makes one: created, then (with `start`) started."""
    from envreg.protocol import KEEPER_LABEL

    command = "run -d" if start else "create"
    labels = [*_runtime_labels(runtime), "--label", f"{KEEPER_LABEL}={runtime}"]
    return subprocess.run(
        ["docker", *command.split(), *labels, "--network", "none", "--entrypoint", "sleep", "envreg/base:latest", "600"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip


@gc_group
def test_gc_leaves_a_runtime_that_is_starting_alone() -> None:
    """A runtime between its keeper's create and start (CI: another test's `gc --grace 0` took the network of a
    runtime in that state, and its first sandbox started without one: KeyError 'envreg-rt_...')."""
    import docker

    from envreg.runtime.backends.docker_keeper import STARTING, Liveness, collect_garbage

    runtime = "rt_start" + os.urandom(3).hex()
    keeper = _keeper(runtime, start=False)
    network = f"envreg-{runtime}"
    subprocess.run(
        ["docker", "network", "create", *_runtime_labels(runtime), network], capture_output=True, check=True
    )
    client = docker.from_env()
    try:
        garbage = collect_garbage(client, grace=0)
        assert network not in garbage.networks and docker_ids("network", f"io.envreg.runtime={runtime}")
        assert keeper in {c.id for c in client.containers.list(all=True, filters={"id": keeper})}
        # a keeper created and never started for longer than a start takes: its runtime died starting
        later = Liveness.read(client, now=time.time() + STARTING + 1)
        assert runtime not in later.alive and runtime in later.gone_since
    finally:
        subprocess.run(["docker", "rm", "-f", keeper], capture_output=True)
        subprocess.run(["docker", "network", "rm", network], capture_output=True)
        client.close()


@gc_group
def test_gc_leaves_a_runtime_that_starts_while_it_runs_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """A runtime that makes its keeper and its network after gc read who lives: what is newer than gc's
    clock reading is kept, though its keeper was not in the read."""
    import docker
    from docker.models.containers import ContainerCollection

    from envreg.runtime.backends.docker_keeper import collect_garbage

    runtime = "rt_during" + os.urandom(3).hex()
    network = f"envreg-{runtime}"
    made: list[str] = []
    client = docker.from_env()
    listing = ContainerCollection.list

    def list_then_a_runtime_starts(self, *args, **kwargs):
        found = listing(self, *args, **kwargs)
        if not made:  # right after gc's first listing, a runtime starts: keeper first, then its network
            made.append(_keeper(runtime, start=True))
            subprocess.run(
                ["docker", "network", "create", *_runtime_labels(runtime), network],
                capture_output=True,
                check=True,
            )
        return found

    monkeypatch.setattr(ContainerCollection, "list", list_then_a_runtime_starts)
    try:
        garbage = collect_garbage(client, grace=0)
        assert made and network not in garbage.networks, (
            "gc removed the network of a runtime that had started"
        )
        assert docker_ids("network", f"io.envreg.runtime={runtime}")
    finally:
        subprocess.run(["docker", "rm", "-f", *made], capture_output=True)
        subprocess.run(["docker", "network", "rm", network], capture_output=True)
        client.close()
