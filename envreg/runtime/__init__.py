"""Sandboxes on the host: one API over the local, instance and container isolation tiers."""

from envreg.runtime.runtime import Isolation, Runtime
from envreg.runtime.sandbox import LocalSandbox, Sandbox
from envreg.runtime.snapshots import Snapshot, SnapshotMismatch, SnapshotStore
from envreg.runtime.sync import SyncRuntime, SyncSandbox

__all__ = [
    "Isolation",
    "LocalSandbox",
    "Runtime",
    "Sandbox",
    "Snapshot",
    "SnapshotMismatch",
    "SnapshotStore",
    "SyncRuntime",
    "SyncSandbox",
]
