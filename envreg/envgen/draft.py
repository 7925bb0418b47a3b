"""A revision as the model wrote it: the files of an environment folder, checked before anything is written.

Only these paths are accepted: ``env.py``, ``seed.json``, ``scenarios/<name>.json`` and
``scenarios/rejected/<name>.json`` (names of letters, digits, ``_`` and ``-``), so that what the model
answers can never name a file outside the folder; JSON files may come as JSON values or as JSON text.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envreg.protocol import FOREIGN_MARKER

PATH = re.compile(r"^(env\.py|seed\.json|scenarios/(rejected/)?[A-Za-z0-9][A-Za-z0-9_-]{0,79}\.json)$")
MAX_BYTES = 1 << 20
MARKER = {
    "kind": "envgen",
    "note": "written by a model (`envreg envgen`): envreg runs it only in container sandboxes",
}


@dataclass(frozen=True)
class Draft:
    """The files of one revision (relative path -> bytes) and the model's note on it."""

    files: dict[str, bytes]
    notes: str = ""

    @classmethod
    def parse(cls, answer: Any) -> Draft:
        """The draft in a model's JSON answer; `ValueError` saying what is wrong (the model is told, and retries)."""
        if not isinstance(answer, dict) or not isinstance(answer.get("files"), dict):
            raise ValueError('answer with a JSON object {"files": {"env.py": "...", ...}, "notes": "..."}')
        files: dict[str, bytes] = {}
        for rel, content in answer["files"].items():
            if not isinstance(rel, str) or not PATH.match(rel):
                raise ValueError(
                    f"file {rel!r} is not one of env.py, seed.json, scenarios/<name>.json, "
                    "scenarios/rejected/<name>.json"
                )
            if rel.endswith(".py"):
                if not isinstance(content, str):
                    raise ValueError(f"{rel} must be the module's source as a string")
                files[rel] = content.encode()
                continue
            if isinstance(content, str):
                try:
                    content = json.loads(content)
                except json.JSONDecodeError as exc:
                    raise ValueError(f"{rel} is not JSON: {exc}") from None
            if not isinstance(content, dict):
                raise ValueError(f"{rel} must be a JSON object")
            files[rel] = (json.dumps(content, indent=2, ensure_ascii=False) + "\n").encode()
        if "env.py" not in files:
            raise ValueError("the files must include env.py")
        if sum(len(data) for data in files.values()) > MAX_BYTES:
            raise ValueError(
                f"the files are over {MAX_BYTES >> 20} MiB together; write a smaller environment"
            )
        notes = answer.get("notes")
        return cls(files, notes if isinstance(notes, str) else "")

    def to_json(self) -> dict[str, Any]:
        """The draft in the answer's own form (what the next request shows the model)."""
        shown: dict[str, Any] = {}
        for rel, data in self.files.items():
            shown[rel] = data.decode() if rel.endswith(".py") else json.loads(data)
        return {"files": shown, "notes": self.notes}

    @property
    def scenarios(self) -> dict[str, bytes]:
        return {
            rel: data
            for rel, data in self.files.items()
            if rel.startswith("scenarios/") and "/rejected/" not in rel
        }

    def folder_files(self, replaced: dict[str, bytes] | None = None) -> dict[str, bytes]:
        """The environment folder's files: the draft's (`replaced` ones swapped in) and the foreign marker."""
        files = {**self.files, **(replaced or {})}
        files[FOREIGN_MARKER] = (json.dumps(MARKER, indent=2) + "\n").encode()
        return files


def write_files(folder: Path, files: dict[str, bytes]) -> None:
    """Write `files` into `folder` (created); every path is checked to stay inside it."""
    root = folder.resolve()
    for rel, data in files.items():
        path = (folder / rel).resolve()
        if root not in path.parents:
            raise ValueError(f"{rel!r} is not inside {folder}")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
