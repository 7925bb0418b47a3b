"""The server's snapshot cache: committed states by the sha256 of their canonical JSON.

A committed state never changes (`envreg.env.cow`), so a snapshot here is a state held by reference:
restoring one into an instance and forking one into many cost no copy. A kept state is the state read
back from its canonical JSON once, exactly what a restore from the durable copy gives on any server:
the same on every tier. The
runtime keeps the durable copy on disk (`envreg.runtime.snapshots`) and sends a state here once
(compressed); from then on restores and forks name it by hash. Least recently used entries go when
the cache is over its budget (counted in canonical bytes); a restore of one that went is answered
"missing", and the runtime sends it again.
"""

from __future__ import annotations

import gzip
import re
import zlib
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from envreg.canonical import sha256_hex
from envreg.env import EnvState
from envreg.env.cow import Committed

SHA256 = re.compile(r"^[0-9a-f]{64}$")
DEFAULT_BUDGET = 32 * 1024 * 1024
"""Canonical bytes of the states kept beyond those that instances hold anyway."""


class SnapshotRefused(ValueError):
    """An upload that is not what its address names, or not a state at all."""


@dataclass
class _Entry:
    state: EnvState
    size: int
    payload: bytes | None = None  # gzip of the canonical JSON, made on the first download


class SnapshotCache:
    """Committed states by hash; least recently used first out, over `budget` canonical bytes."""

    def __init__(self, budget: int = DEFAULT_BUDGET, max_entries: int = 1024) -> None:
        self.budget = budget
        self.max_entries = max_entries
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, sha: str) -> bool:
        return sha in self._entries

    def keep(self, state: EnvState, parse: Any) -> str:
        """Keep the state a restore of `state`'s snapshot gives; returns the sha256 of its canonical JSON.

        That is the state read back from its canonical JSON (`parse`), exactly as a restore from the
        durable copy or on another server gives it (dicts in sorted key order; whatever the state
        model's validators make of it), so that every tier restores the same state. The instance
        keeps its own state as it is."""
        text = state.canonical()
        sha = state.sha256()
        if sha in self._entries:
            self._entries.move_to_end(sha)
        else:
            kept = parse(text)
            fields = kept.__pydantic_fields_set__
            if type(fields) is Committed:
                fields.memo = (text, sha)  # the canonical form it was read from
            self._add(sha, _Entry(kept, len(text.encode())))
        return sha

    def get(self, sha: str) -> EnvState | None:
        entry = self._entries.get(sha)
        if entry is None:
            return None
        self._entries.move_to_end(sha)
        return entry.state

    def payload(self, sha: str) -> bytes | None:
        """The canonical JSON, gzip-compressed (made once per entry)."""
        entry = self._entries.get(sha)
        if entry is None:
            return None
        if entry.payload is None:
            entry.payload = gzip.compress(entry.state.canonical().encode(), compresslevel=1, mtime=0)
        return entry.payload

    def receive(self, sha: str, body: bytes, encoding: str | None, parse: Any, limit: int) -> EnvState:
        """Keep an uploaded state: its canonical JSON (gzip when `encoding` says so) must hash to `sha`,
        and `parse` (the environment's validation) must accept it. Raises `SnapshotRefused`."""
        if sha in self._entries:
            return self.get(sha)  # type: ignore[return-value]
        text = _decompress(body, encoding, limit)
        if sha256_hex(text) != sha:
            raise SnapshotRefused(
                f"the uploaded state does not hash to {sha[:12]}...: it is not the snapshot its address names"
            )
        state = parse(text)
        self._add(sha, _Entry(state, len(text)))
        return state

    def _add(self, sha: str, entry: _Entry) -> None:
        self._entries[sha] = entry
        self._bytes += entry.size
        while len(self._entries) > 1 and (self._bytes > self.budget or len(self._entries) > self.max_entries):
            _, gone = self._entries.popitem(last=False)
            self._bytes -= gone.size


def _decompress(body: bytes, encoding: str | None, limit: int) -> bytes:
    if encoding in (None, "", "identity"):
        if len(body) > limit:
            raise SnapshotRefused(f"the uploaded state is over this server's limit of {limit:,} bytes")
        return body
    if encoding != "gzip":
        raise SnapshotRefused(f"unsupported content-encoding {encoding!r}: send gzip or identity")
    inflater = zlib.decompressobj(wbits=31)
    try:
        text = inflater.decompress(body, limit + 1)
    except zlib.error as exc:
        raise SnapshotRefused(f"the uploaded state is not valid gzip: {exc}") from None
    if len(text) > limit or inflater.unconsumed_tail:
        raise SnapshotRefused(f"the uploaded state is over this server's limit of {limit:,} bytes")
    return text
