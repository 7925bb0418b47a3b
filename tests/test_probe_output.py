"""`run_python` (the validate probes run in a container): an output the engine lost is run again, a
probe that never prints is a `ProbeError` that says so, a failing probe is one at once."""

from __future__ import annotations

from types import SimpleNamespace

import anyio
import pytest

from envreg.validate.probe import PROBE_ATTEMPTS, ProbeError, run_python


class Container:
    def __init__(self, *outputs: tuple[int, bytes]) -> None:
        self.outputs = list(outputs)
        self.runs = 0

    def exec_run(self, cmd, demux, environment):
        self.runs += 1
        code, output = self.outputs.pop(0) if len(self.outputs) > 1 else self.outputs[0]
        return SimpleNamespace(exit_code=code, output=output)


def test_an_output_the_engine_lost_is_read_again() -> None:
    container = Container((0, b""), (0, b'{"Tcp": {"ActiveOpens": 3}}\n'))
    assert anyio.run(run_python, container, "print(1)") == {"Tcp": {"ActiveOpens": 3}}
    assert container.runs == 2


def test_a_probe_that_never_prints_says_so() -> None:
    container = Container((0, b""))
    with pytest.raises(ProbeError, match="printed nothing 3 times"):
        anyio.run(run_python, container, "pass")
    assert container.runs == PROBE_ATTEMPTS


def test_a_failing_probe_is_not_run_again() -> None:
    container = Container((1, b"Traceback: boom"))
    with pytest.raises(ProbeError, match="probe exited 1: Traceback: boom"):
        anyio.run(run_python, container, "raise SystemExit(1)")
    assert container.runs == 1
