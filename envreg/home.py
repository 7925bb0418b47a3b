"""Where envreg keeps its data: ``$ENVREG_HOME`` (default ``~/.envreg``)."""

from __future__ import annotations

import os
from pathlib import Path


def envreg_home() -> Path:
    home = Path(os.environ.get("ENVREG_HOME") or Path.home() / ".envreg")
    home.mkdir(parents=True, exist_ok=True)
    return home
