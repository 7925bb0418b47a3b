"""Batches of (record, output) items: read from files, scored concurrently, one result or error per item."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
from pydantic import BaseModel, ConfigDict, Field

from envreg.reward.score import RewardBreakdown, ScoreOptions, Scorer
from envreg.reward.truth import read_truth


class ScoreItem(BaseModel):
    """One prediction to score: the record (or its ground truth) and the model's raw output."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    record: Any = Field(
        description="A trajectory record, or its ground-truth fields (envs, calls, initial_states, final_states), "
        "as an object or JSON text."
    )
    output: Any = Field(
        default=None,
        description="Raw model output: text with <tool_call> tags, OpenAI tool-call JSON, or a message list.",
    )
    extra_info: dict[str, Any] | None = Field(
        default=None,
        description="A verl row's extra_info, when the record is its ground truth (states there).",
    )
    options: ScoreOptions | None = Field(
        default=None, description="Overrides the scorer's options for this item."
    )


class ItemResult(BaseModel):
    """A breakdown, or the error that kept the item from being scored (bad record, sandbox failure)."""

    index: int
    result: RewardBreakdown | None = None
    error: str | None = None


async def score_items(
    scorer: Scorer,
    items: list[ScoreItem],
    limiter: anyio.CapacityLimiter,
    *,
    oracle: bool = False,
    on_done: Callable[[ItemResult], None] | None = None,
) -> list[ItemResult]:
    """Score every item, as many at once as `limiter` allows; a failing item never stops the others."""
    results: list[ItemResult | None] = [None] * len(items)

    async def one(index: int, item: ScoreItem) -> None:
        async with limiter:
            try:
                truth = read_truth(item.record, item.extra_info)
                breakdown = await scorer.score(truth, item.output, item.options, oracle=oracle)
                done = ItemResult(index=index, result=breakdown)
            except ValueError as exc:
                done = ItemResult(index=index, error=str(exc))
            except Exception as exc:  # a sandbox failure: report it for this item only
                done = ItemResult(index=index, error=f"{type(exc).__name__}: {exc}")
            await anyio.lowlevel.checkpoint()  # local-tier evaluations never yield: let others in
        results[index] = done
        if on_done:
            on_done(done)

    async with anyio.create_task_group() as tg:
        for index, item in enumerate(items):
            tg.start_soon(one, index, item)
    return [r for r in results if r is not None]


def read_items(path: Path, response_key: str = "responses", oracle: bool = False) -> list[ScoreItem]:
    """Items from a file: JSON Lines or JSON (items, or records with ``--oracle``), or a verl parquet file.

    Raises `ValueError` naming the line or row at fault.
    """
    if not path.is_file():
        raise ValueError(f"no such file: {path}")
    if path.suffix == ".parquet":
        return list(_parquet_items(path, response_key, oracle))
    text = path.read_text()
    if path.suffix == ".json" or text.lstrip().startswith("["):
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise ValueError(f"{path}: not valid JSON: {exc}") from None
        rows = data if isinstance(data, list) else [data]
        return [_item(row, f"{path} item {i}", oracle) for i, row in enumerate(rows)]
    items = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as exc:
            raise ValueError(f"{path}:{n}: not valid JSON: {exc}") from None
        items.append(_item(row, f"{path}:{n}", oracle))
    return items


def _item(row: Any, where: str, oracle: bool) -> ScoreItem:
    if not isinstance(row, dict):
        raise ValueError(f"{where}: expected an object with `record` and `output`")
    if "record" not in row and "ground_truth" not in row:
        if oracle or "turns" in row:
            if not oracle:
                raise ValueError(
                    f"{where}: a bare record has no model output to score; "
                    "pass --oracle to score the records' own calls"
                )
            return ScoreItem(record=row)
        raise ValueError(f"{where}: expected `record` (or `ground_truth`) and `output` (or `response`)")
    record = row.get("record", row.get("ground_truth"))
    output = row.get("output", row.get("response"))
    if output is None and not oracle:
        raise ValueError(f"{where}: no `output`; pass --oracle to score the records' own calls")
    try:
        return ScoreItem(
            record=record, output=output, extra_info=row.get("extra_info"), options=row.get("options")
        )
    except Exception as exc:
        raise ValueError(f"{where}: {exc}") from None


def _parquet_items(path: Path, response_key: str, oracle: bool) -> Iterator[ScoreItem]:
    """verl layout: ``reward_model.ground_truth`` per row, and the generated responses in `response_key`."""
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise ValueError("reading parquet needs pyarrow: pip install 'envreg[reward]'") from None
    rows = pq.read_table(path).to_pylist()
    for i, row in enumerate(rows):
        reward_model = row.get("reward_model") or {}
        truth = reward_model.get("ground_truth") if isinstance(reward_model, dict) else None
        if truth is None:
            raise ValueError(f"{path} row {i}: no reward_model.ground_truth (is this a verl RL file?)")
        extra_info = row.get("extra_info") if isinstance(row.get("extra_info"), dict) else None
        if oracle:
            yield ScoreItem(record=truth, extra_info=extra_info)
            continue
        if response_key not in row:
            raise ValueError(
                f"{path} row {i}: no {response_key!r} column; name the column of model outputs with --response-key"
            )
        responses = row[response_key]
        for response in responses if isinstance(responses, list) else [responses]:
            yield ScoreItem(record=truth, output=response, extra_info=extra_info)
