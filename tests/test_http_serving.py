"""Who stops envreg's servers on a signal (`envreg.http.serving`): a process that is its servers stops them
all at once and ends as the signal ends it; an embedded server leaves the signal to the program it is in."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import threading

import anyio
import pytest
import uvicorn
from conftest import COUNTER, needs_main_thread
from servers import EnvServerProcess, ctrl_c_as_from_a_terminal

from envreg.http.serving import SIGNALS, QuietServer, SignalStop


def idle_server() -> uvicorn.Server:
    return uvicorn.Server(uvicorn.Config(app=None))


@needs_main_thread
def test_a_signal_stops_every_server_at_once_and_is_raised_again_after() -> None:
    received: list[int] = []

    def host(signum: int, _: object) -> None:
        received.append(signum)

    before = {signum: signal.signal(signum, host) for signum in SIGNALS}
    try:
        first, second, late = idle_server(), idle_server(), idle_server()
        with SignalStop() as stop:
            stop.add(first)
            stop.add(second)
            signal.raise_signal(signal.SIGTERM)
            assert first.should_exit and second.should_exit  # both, not one after the other
            assert not first.force_exit
            stop.add(late)  # a server added after the signal stops at once
            assert late.should_exit
            signal.raise_signal(signal.SIGINT)
            assert not first.force_exit  # one Ctrl-C waits for open connections
            signal.raise_signal(signal.SIGINT)
            assert first.force_exit and second.force_exit and late.force_exit  # a second does not
            assert received == []  # the host's handler saw nothing while the servers stopped
        assert all(signal.getsignal(signum) is host for signum in SIGNALS)
        assert received == [signal.SIGINT, signal.SIGTERM]  # raised again, once each, last first
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)


@needs_main_thread
def test_a_stop_that_ends_by_an_exception_raises_no_signal_again() -> None:
    received: list[int] = []
    before = signal.signal(signal.SIGTERM, lambda signum, _: received.append(signum))
    try:
        with pytest.raises(RuntimeError, match="boom"), SignalStop():
            signal.raise_signal(signal.SIGTERM)
            raise RuntimeError("boom")
        assert received == []
    finally:
        signal.signal(signal.SIGTERM, before)


@pytest.mark.anyio
async def test_an_idle_server_sleeps_and_is_woken_when_told_to_exit() -> None:
    """It ticks once a second, not ten times (its Date header's work each time), and ends when told to
    even in the middle of an hour's sleep: from another thread, as a signal handler tells it."""

    async def app(scope: dict, receive: object, send: object) -> None:
        raise AssertionError("no request is made")

    config = uvicorn.Config(app, host="127.0.0.1", port=0, lifespan="off", log_level="warning")
    server = QuietServer(config)
    server.tick_seconds = 3600
    ticks: list[int] = []
    on_tick = server.on_tick

    async def counting(counter: int) -> bool:
        ticks.append(counter)
        return await on_tick(counter)

    server.on_tick = counting  # type: ignore[method-assign]
    with anyio.fail_after(20):  # a server that only polls would still be asleep
        async with anyio.create_task_group() as tg:
            tg.start_soon(server.serve)
            while not server.started:
                await anyio.sleep(0.01)
            threading.Thread(target=setattr, args=(server, "should_exit", True)).start()
    assert ticks == [0, 10]  # one tick at the start, one when woken; each a once-a-second one
    assert b"date" in dict(server.server_state.default_headers)


@pytest.mark.parametrize("image_entry", [False, True], ids=["serve-env", "image-entry"])
def test_an_environment_server_ends_as_sigterm_ends_a_process(image_entry: bool) -> None:
    server = EnvServerProcess(COUNTER, image_entry=image_entry).start()
    server.proc.send_signal(signal.SIGTERM)
    assert server.proc.wait(10) == -signal.SIGTERM  # as before: the runtime and docker read it so


@needs_main_thread
def test_ctrl_c_stops_serve_env_with_130() -> None:
    with ctrl_c_as_from_a_terminal():
        server = EnvServerProcess(COUNTER).start()
    server.proc.send_signal(signal.SIGINT)
    assert server.proc.wait(10) == 130


@needs_main_thread
def test_ctrl_c_ends_the_image_entry_by_sigint_without_a_traceback(capfd) -> None:
    with ctrl_c_as_from_a_terminal():
        server = EnvServerProcess(COUNTER, image_entry=True).start()
    server.proc.send_signal(signal.SIGINT)
    assert server.proc.wait(10) == -signal.SIGINT  # what a shell reads as Ctrl-C
    assert "Traceback" not in capfd.readouterr().err


PROGRAM = """
    import anyio
    from envreg.env import load_environment
    from envreg.server.local import local_sandbox

    async def main():
        async with local_sandbox(load_environment({counter!r})) as sandbox:
            print("ready", flush=True)
            while True:  # the program goes on using its sandbox until Ctrl-C
                await sandbox.state()
                await anyio.sleep(0.01)

    anyio.run(main)
"""


@needs_main_thread
def test_ctrl_c_interrupts_a_program_that_holds_a_local_sandbox() -> None:
    """The local tier serves in the caller's event loop: Ctrl-C is the program's KeyboardInterrupt. (The
    server's planes took it: the program went on against a stopped server, 'did not answer'.)"""
    program = textwrap.dedent(PROGRAM).format(counter=COUNTER)
    with ctrl_c_as_from_a_terminal():
        proc = subprocess.Popen(
            [sys.executable, "-c", program], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
    try:
        assert proc.stdout.readline() == "ready\n", proc.stderr.read() if proc.poll() is not None else ""
        proc.send_signal(signal.SIGINT)
        code = proc.wait(30)
        stderr = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "KeyboardInterrupt" in stderr.splitlines()[-1], stderr
    assert "did not answer" not in stderr and "UpstreamDropped" not in stderr
    assert code == -signal.SIGINT  # an uncaught KeyboardInterrupt ends Python by SIGINT
