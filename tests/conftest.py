from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("ENVREG_IMAGES", str(ROOT / "images"))
REFERENCE_ENVS = ["calendar", "airline", "bank"]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
