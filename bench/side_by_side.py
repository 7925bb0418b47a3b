"""What the benches that measure this checkout beside another one (`--before DIR`) share."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path


def measured_in(checkout: Path, script: str, args: Sequence[str]) -> dict[str, float]:
    """`script --json ARGS` run in `checkout` (a subprocess with that folder first on sys.path): its figures."""
    folder = checkout.resolve()
    env = {**os.environ, "PYTHONPATH": str(folder)}
    argv = [sys.executable, str(Path(script).resolve()), "--json", *args]
    done = subprocess.run(argv, cwd=folder, env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def print_beside(
    title: str, label: str, now: dict[str, float], before: dict[str, float], scale: float, digits: int
) -> None:
    """A row per figure (seconds, shown times `scale`), with the other checkout's and the ratio where it has one."""
    print(f"\n{title}")
    print(f"{label:<28} {'now':>8}" + (f" {'before':>8} {'ratio':>6}" if before else ""))
    for name, seconds in now.items():
        row = f"{name:<28} {seconds * scale:>8.{digits}f}"
        if name in before:
            row += f" {before[name] * scale:>8.{digits}f} {before[name] / seconds:>5.2f}x"
        print(row)
