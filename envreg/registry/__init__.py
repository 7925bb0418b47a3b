"""The registry: a local index (SQLite, the embedded default) over the engine's image store, a client for
any OCI distribution registry, the `envreg.lock` lockfile and offline archives.

Entry points other modules use:
- `record_image(image, source, *, repo_digest=None, tag=True, local_ref=None) -> IndexRecord` (build / pull / load)
- `resolve(ref) -> IndexRecord` (the runtime: `name`, `name:version`, `name@sha256:...`; `LookupError`)
"""

from envreg.registry.errors import AuthError, NotFound, RegistryError, VerificationError
from envreg.registry.index import IndexRecord, LocalIndex, list_records, record_image, remove, resolve
from envreg.registry.lockfile import LockEntry, Lockfile

__all__ = [
    "AuthError",
    "IndexRecord",
    "LocalIndex",
    "LockEntry",
    "Lockfile",
    "NotFound",
    "RegistryError",
    "VerificationError",
    "list_records",
    "record_image",
    "remove",
    "resolve",
]
