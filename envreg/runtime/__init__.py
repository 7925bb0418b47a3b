"""Sandboxes on the host: one API over the local, instance and container isolation tiers."""

from envreg.errors import (
    EngineError,
    ImageNotFound,
    InvalidState,
    SandboxGone,
    SnapshotCorrupt,
    SnapshotMismatch,
    SnapshotNotFound,
)
from envreg.protocol import Isolation
from envreg.runtime.runtime import Runtime
from envreg.runtime.sandbox import Sandbox
from envreg.runtime.snapshots import Snapshot, SnapshotStore
from envreg.runtime.sync import SyncRuntime, SyncSandbox

__all__ = [
    "EngineError",
    "ImageNotFound",
    "InvalidState",
    "Isolation",
    "Runtime",
    "Sandbox",
    "SandboxGone",
    "Snapshot",
    "SnapshotCorrupt",
    "SnapshotMismatch",
    "SnapshotNotFound",
    "SnapshotStore",
    "SyncRuntime",
    "SyncSandbox",
]
