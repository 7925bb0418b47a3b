"""The files the console may read: those under the folders the daemon is told about (``--ui-data``), or
the files given to `envreg report`; never a path from the browser (files are named by an id).

An episodes file (JSON Lines, or a JSON list) is indexed once: each line's byte offset and a summary
(id, environments, stored reward, failure reason) are kept, and a page reads only the lines it shows.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

Kind = Literal["episodes", "validation", "graph"]
SNIFF = 4096
MAX_DEPTH = 3


@dataclass(frozen=True)
class DataFile:
    id: str
    path: Path
    kind: Kind
    label: str


def file_id(path: Path) -> str:
    return hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]


def sniff(path: Path) -> Kind | None:
    """What a file holds, from its name and first bytes: a validation report, a tool graph or episodes."""
    if path.suffix not in (".json", ".jsonl"):
        return None
    try:
        with path.open("rb") as f:
            head = f.read(SNIFF).decode("utf-8", "replace")
    except OSError:
        return None
    start = head.lstrip()
    if path.suffix == ".jsonl" or start.startswith("["):
        return "episodes" if start.startswith(("{", "[")) else None
    if '"envreg.validate"' in head:
        return "validation"
    if '"envreg.tool-graph"' in head:
        return "graph"
    if start.startswith("{") and ('"turns"' in head or '"record"' in head):
        return "episodes"
    return None


@dataclass
class DataFiles:
    """The files under `folders` (a few levels deep) and the `files` named one by one."""

    folders: tuple[Path, ...] = ()
    files: tuple[Path, ...] = ()
    _indexes: dict[str, EpisodeIndex] = field(default_factory=dict)

    def scan(self) -> list[DataFile]:
        found: dict[str, DataFile] = {}
        candidates = [(p, p.name) for p in self.files]
        for folder in self.folders:
            for path in sorted(folder.rglob("*.json*")):
                if len(path.relative_to(folder).parts) <= MAX_DEPTH and path.is_file():
                    candidates.append((path, f"{folder.name}/{path.relative_to(folder)}"))
        for path, label in candidates:
            kind = sniff(path)
            if kind is not None:
                fid = file_id(path)
                found.setdefault(fid, DataFile(fid, path, kind, label))
        return list(found.values())

    def get(self, fid: str) -> DataFile | None:
        return next((f for f in self.scan() if f.id == fid), None)

    def graph_file(self) -> Path | None:
        return next((f.path for f in self.scan() if f.kind == "graph"), None)

    def index(self, data: DataFile) -> EpisodeIndex:
        stat = data.path.stat()
        key = f"{data.id}:{stat.st_mtime_ns}:{stat.st_size}"
        if key not in self._indexes:
            self._indexes = {k: v for k, v in self._indexes.items() if not k.startswith(f"{data.id}:")}
            self._indexes[key] = EpisodeIndex.build(data.path)
        return self._indexes[key]


@dataclass(frozen=True)
class Summary:
    """What the list and its filters need of one episode."""

    index: int
    id: str
    kind: str  # rollout (an EpisodeRecord), trajectory (a record), item ({record, output})
    envs: tuple[str, ...]
    turns: int
    reward: float | None
    failure: str


@dataclass
class EpisodeIndex:
    path: Path
    offsets: list[tuple[int, int]]  # byte offset and length of each episode (JSON Lines), else empty
    summaries: list[Summary]
    rows: list[Any] | None = None  # a JSON list file is held whole

    @classmethod
    def build(cls, path: Path) -> EpisodeIndex:
        offsets: list[tuple[int, int]] = []
        summaries: list[Summary] = []
        with path.open("rb") as f:
            first = f.read(SNIFF).lstrip()
        if first.startswith(b"["):
            rows = json.loads(path.read_bytes())
            return cls(path, [], [summarize(i, row) for i, row in enumerate(rows)], rows)
        with path.open("rb") as f:
            offset = 0
            for line in f:
                if line.strip():
                    try:
                        row = json.loads(line)
                    except ValueError:
                        row = {"error": f"line {len(offsets) + 1} is not valid JSON"}
                    summaries.append(summarize(len(offsets), row))
                    offsets.append((offset, len(line)))
                offset += len(line)
        return cls(path, offsets, summaries)

    def __len__(self) -> int:
        return len(self.summaries)

    def row(self, index: int) -> Any:
        if self.rows is not None:
            return self.rows[index]
        offset, length = self.offsets[index]
        with self.path.open("rb") as f:
            f.seek(offset)
            return json.loads(f.read(length))

    def envs(self) -> list[str]:
        return sorted({env for s in self.summaries for env in s.envs})

    def failures(self) -> list[str]:
        return sorted({s.failure for s in self.summaries if s.failure})

    def select(
        self,
        env: str = "",
        failure: str = "",
        min_reward: float | None = None,
        max_reward: float | None = None,
    ) -> list[Summary]:
        def keep(s: Summary) -> bool:
            if env and env not in s.envs:
                return False
            if failure and s.failure != failure:
                return False
            if (min_reward is not None or max_reward is not None) and s.reward is None:
                return False
            if min_reward is not None and s.reward is not None and s.reward < min_reward:
                return False
            return not (max_reward is not None and s.reward is not None and s.reward > max_reward)

        return [s for s in self.summaries if keep(s)]


def kind_of(row: Any) -> str:
    if isinstance(row, dict) and ("record" in row or "ground_truth" in row):
        return "item"
    if isinstance(row, dict) and "task_id" in row:
        return "rollout"
    return "trajectory"


def summarize(index: int, row: Any) -> Summary:
    if not isinstance(row, dict):
        return Summary(index, f"#{index}", "trajectory", (), 0, None, "not an object")
    kind = kind_of(row)
    record = row.get("record", row.get("ground_truth")) if kind == "item" else row
    record = record if isinstance(record, dict) else {}
    envs = tuple(str(x.get("name", x)) if isinstance(x, dict) else str(x) for x in record.get("envs", []))
    reward = row.get("reward", {}).get("reward") if isinstance(row.get("reward"), dict) else None
    failure = ""
    if kind == "rollout":
        gate = (row.get("reward") or {}).get("gate")
        if row.get("error"):
            failure = "error"
        elif gate:
            failure = gate
        elif row.get("stop", "answered") != "answered":
            failure = row["stop"]
        if not failure and not row.get("passed"):
            failure = "not passed"
    elif "error" in row and kind != "item":
        failure = "unreadable"
    return Summary(
        index,
        str(record.get("id") or row.get("id") or f"#{index}"),
        kind,
        envs,
        len(record.get("turns") or []),
        reward,
        str(failure),
    )
