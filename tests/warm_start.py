"""Start the tests' long-running `envreg` commands (`serve-env`, `serve`, `reward serve`) as forks of a warm
interpreter instead of new ones.

A new interpreter for a server spends about 0.3 CPU-s importing envreg, typer and uvicorn before it binds a
port, and 0.37 more importing the `mcp` SDK on its first 2025-11-25 session; the fast suite starts about
eighty of them, on two cores (issue 19). Each test process gets one `multiprocessing` forkserver that has
imported those modules once; a command is a fork of it that runs `envreg ARGS` as `python -m envreg.cli.main
ARGS` would: the same entry, its own environment variables and SIGINT disposition (ignored when the test
process ignores it, as a shell's background job does), its own exit status (a signal's: minus its number) and,
when asked, its output on a pipe. What a fork shares with its siblings is what their imports made, and their
hash seed.

Tests that start a server from another folder or through the image's entry (`python -m envreg.server`), and
one-shot CLI runs, still start a new interpreter (`subprocess`).
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
from multiprocessing.connection import Connection
from typing import IO, Any

PRELOAD = [
    "envreg.cli.main",
    "envreg.cli.reward",
    "envreg.cli.serve_env",
    "envreg.console.app",
    "envreg.daemon.serve",
    "envreg.reward.server",
    "envreg.server.app",
    "envreg.server.sdk",
    "mcp.server.lowlevel.server",
    "mcp.server.streamable_http_manager",
    "typer._adapters",
]
"""What the forkserver imports once: the commands' modules, the servers' apps and the `mcp` SDK's server."""

_context: Any = None


def _forkserver() -> Any:
    global _context
    if _context is None:
        _context = multiprocessing.get_context("forkserver")
        _context.set_forkserver_preload(PRELOAD)
    return _context


def _run(
    args: list[str], environ: dict[str, str], sigint_ignored: bool, outputs: dict[int, Connection]
) -> None:
    """In the fork: `envreg ARGS` as a new interpreter would run it."""
    for fd, pipe in outputs.items():
        os.dup2(pipe.fileno(), fd)
    for stream in (sys.stdout, sys.stderr):
        stream.reconfigure(line_buffering=True)  # a reader of the pipe sees each line as it is written
    os.environ.clear()
    os.environ.update(environ)
    signal.signal(signal.SIGINT, signal.SIG_IGN if sigint_ignored else signal.default_int_handler)
    _save_coverage_on_sigterm()
    from envreg.cli import main

    sys.argv = [main.__file__, *args]
    main.app(args, prog_name="envreg")


def _save_coverage_on_sigterm() -> None:
    """Under scripts/coverage, a fork ended by SIGTERM saves what it measured, then dies of the signal as it
    would have. (The handler coverage installs, inherited from the forkserver, would stop the forkserver's
    measurement, not the one multiprocessing starts in the fork.)"""
    coverage = sys.modules.get("coverage")  # imported by its .pth file when it measures
    measuring = coverage.Coverage.current() if coverage else None
    if measuring is None:
        return

    def save_and_end(signum: int, frame: object) -> None:
        measuring.stop()
        measuring.save()
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    signal.signal(signal.SIGTERM, save_and_end)


class WarmProcess:
    """`envreg ARGS` forked from the warm interpreter, with what the tests use of `subprocess.Popen`."""

    def __init__(
        self,
        args: list[str],
        env: dict[str, str] | None = None,
        *,
        stdout: int | None = None,
        stderr: int | None = None,
        text: bool = False,
    ):
        """`stdout`, `stderr`: None (the test process's) or `subprocess.PIPE`; `stderr` also `subprocess.STDOUT`."""
        self.args = args
        pipes = {fd: os.pipe() for fd, how in ((1, stdout), (2, stderr)) if how == subprocess.PIPE}
        ends = {fd: Connection(write, readable=False) for fd, (_, write) in pipes.items()}  # sent to the fork
        if stderr == subprocess.STDOUT:
            ends[2] = ends[1]
        ignored = signal.getsignal(signal.SIGINT) == signal.SIG_IGN
        self._process = _forkserver().Process(
            target=_run,
            args=(list(args), dict(os.environ if env is None else env), ignored, ends),
            daemon=True,  # ended with the test process if a test leaves it running
        )
        self._process.start()
        for end in ends.values():
            end.close()
        mode = "r" if text else "rb"
        self.stdout: IO[Any] | None = os.fdopen(pipes[1][0], mode) if 1 in pipes else None
        self.stderr: IO[Any] | None = os.fdopen(pipes[2][0], mode) if 2 in pipes else None
        self.pid: int = self._process.pid

    @property
    def returncode(self) -> int | None:
        return self._process.exitcode

    def poll(self) -> int | None:
        return self._process.exitcode

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        if self._process.exitcode is None:
            raise subprocess.TimeoutExpired(["envreg", *self.args], timeout or 0)
        return self._process.exitcode

    def send_signal(self, sig: int) -> None:
        if self._process.exitcode is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)
