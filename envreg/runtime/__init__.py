"""Sandboxes on the host: one API over the local, instance and container isolation tiers."""

from envreg.runtime.runtime import Isolation, Runtime
from envreg.runtime.sandbox import LocalSandbox, RemoteSandbox, Sandbox
from envreg.runtime.errors import EngineError, InvalidState, SandboxGone
from envreg.runtime.snapshots import Snapshot, SnapshotMismatch, SnapshotStore
from envreg.runtime.sync import SyncRuntime, SyncSandbox

__all__ = [
    "Isolation",
    "EngineError",
    "InvalidState",
    "LocalSandbox",
    "RemoteSandbox",
    "SandboxGone",
    "Runtime",
    "Sandbox",
    "Snapshot",
    "SnapshotMismatch",
    "SnapshotStore",
    "SyncRuntime",
    "SyncSandbox",
]
