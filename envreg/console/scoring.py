"""Rewards of the episodes that store none (records, {record, output} items), scored with `envreg.reward`
exactly as `envreg reward score` scores them (default options, the local tier), once per episode; the served
console scores only its catalog's environments (a record naming another folder gets nothing of it imported)."""

from __future__ import annotations

from typing import Any

import anyio

from envreg.console.data import kind_of
from envreg.reward.batch import ScoreItem, score_items
from envreg.reward.score import Scorer

CATALOG_HINT = "the console scores the environments of its catalog: name one of those"


def item_of(row: Any) -> tuple[ScoreItem, bool]:
    """The `ScoreItem` `envreg reward score` reads from this line, and whether it scores the oracle's calls."""
    if kind_of(row) == "item":
        record = row.get("record", row.get("ground_truth"))
        output = row.get("output", row.get("response"))
        item = ScoreItem(
            record=record, output=output, extra_info=row.get("extra_info"), options=row.get("options")
        )
        return item, output is None
    return ScoreItem(record=row), True


class EpisodeScores:
    """Breakdowns by (file id, episode index): a rollout's stored one, or one scored on first request."""

    def __init__(self, runtime: Any, catalog: dict[str, str] | None = None) -> None:
        self.runtime = runtime
        self.catalog = catalog
        """Environment name -> folder: the only environments records may name (the served console's);
        None: any name or folder, as `envreg reward score` resolves them (`envreg report`)."""
        self._done: dict[tuple[str, int], tuple[dict[str, Any] | None, str | None]] = {}
        self._scorer: Scorer | None = None
        self._lock = anyio.Lock()

    def rewards(self, fid: str) -> dict[int, float]:
        return {i: b["reward"] for (f, i), (b, _) in self._done.items() if f == fid and b is not None}

    async def get(self, fid: str, index: int, row: Any) -> tuple[dict[str, Any] | None, str | None]:
        """(breakdown as `envreg reward score --json` prints it, None) or (None, why it could not be scored)."""
        if kind_of(row) == "rollout":
            reward = row.get("reward") if isinstance(row, dict) else None
            return (reward if isinstance(reward, dict) else None), None
        key = (fid, index)
        if key not in self._done:
            async with self._lock:
                if key not in self._done:
                    self._done[key] = await self._score(row)
        return self._done[key]

    async def _score(self, row: Any) -> tuple[dict[str, Any] | None, str | None]:
        try:
            item, oracle = item_of(row)
        except Exception as exc:
            return None, f"not a scorable line: {exc}"
        if self._scorer is None:
            hint = None if self.catalog is None else CATALOG_HINT
            self._scorer = Scorer(self.runtime, isolation="local", sources=self.catalog, only_sources=hint)
        (result,) = await score_items(self._scorer, [item], anyio.CapacityLimiter(1), oracle=oracle)
        if result.result is None:
            return None, result.error or "no result"
        return result.result.model_dump(mode="json", exclude_none=True), None

    async def close(self) -> None:
        if self._scorer is not None:
            await self._scorer.close()
