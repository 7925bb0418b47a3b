"""Sandboxes on the host: one API over the local, instance and container isolation tiers."""

from envreg.runtime.errors import EngineError, ImageNotFound, InvalidState, SandboxGone
from envreg.runtime.runtime import Isolation, Runtime
from envreg.runtime.sandbox import LocalSandbox, RemoteSandbox, Sandbox
from envreg.runtime.snapshots import Snapshot, SnapshotMismatch, SnapshotStore
from envreg.runtime.sync import SyncRuntime, SyncSandbox

__all__ = [
    "EngineError",
    "ImageNotFound",
    "InvalidState",
    "Isolation",
    "LocalSandbox",
    "RemoteSandbox",
    "Runtime",
    "Sandbox",
    "SandboxGone",
    "Snapshot",
    "SnapshotMismatch",
    "SnapshotStore",
    "SyncRuntime",
    "SyncSandbox",
]
