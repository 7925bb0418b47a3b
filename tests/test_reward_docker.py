"""Reward replay and augmentation on the Docker tiers: the same breakdowns as the local tier, any MCP agent augmented."""

from __future__ import annotations

import pytest
import yaml
from mcp_helpers import mcp_client
from reward_helpers import as_tool_call_tags, executed_trajectory, scenario_truth

from envreg.reward.augment import augmentation_for, load_catalog
from envreg.reward.score import ScoreOptions, Scorer
from envreg.runtime import Runtime

pytestmark = [pytest.mark.docker, pytest.mark.anyio]


@pytest.fixture(autouse=True)
def _images(reference_images) -> None:
    pass


def cases() -> list[tuple[dict, str]]:
    bank = scenario_truth("bank", "pay_new_payee_chain")
    cal = scenario_truth("calendar", "tidy_up_the_week")
    ok = [c for c in bank["calls"] if not c["is_error"]]
    return [
        (bank, as_tool_call_tags(bank["calls"])),
        (bank, as_tool_call_tags([*ok[:3], {"env": "bank", "tool": "nope", "arguments": {}}])),
        (cal, as_tool_call_tags(cal["calls"][::-1])),
        (cal, '<tool_call>{"name": "list_events", "arguments": {"day": 7}}</tool_call><tool_call>{bad'),
    ]


@pytest.mark.parametrize("isolation", ["instance", "container"])
async def test_every_tier_gives_the_local_tiers_breakdown(isolation) -> None:
    options = ScoreOptions(partial_state=True, ordered=True)
    async with Runtime(pool={isolation: 2}) as rt:
        local, remote = Scorer(rt, options=options), Scorer(rt, isolation=isolation, options=options)
        for truth, output in cases() * 2:  # twice: the second round reuses the sandboxes
            want = (await local.score(truth, output)).model_dump()
            got = (await remote.score(truth, output)).model_dump()
            assert got == want
        await remote.close()


async def test_an_mcp_agent_on_a_container_sandbox_gets_the_augmentation() -> None:
    config = augmentation_for(
        "calendar", seed=4, formats=["yaml"], errors=1.0, distractors=2, catalog=load_catalog(), embed="tfidf"
    )
    async with Runtime() as rt:
        sb = await rt.sandbox("calendar", isolation="container", augment=config)
        async with mcp_client(sb.mcp_url, "2026-07-28", token=sb.token) as client:
            names = {t.name for t in (await client.list_tools()).tools}
            assert {d["name"] for d in config.distractors} <= names
            first = await client.call_tool("list_calendars", {})
            assert first.is_error and "Retry" in first.content[0].text
            retry = await client.call_tool("list_calendars", {})
            assert not retry.is_error
            plain = await rt.sandbox("calendar", isolation="local")
            assert (
                yaml.safe_load(retry.content[0].text) == (await plain.call_tool("list_calendars", {})).value
            )
        labels = await sb.augmentation_labels()
        assert [(e["kind"], e.get("format")) for e in labels] == [("injected_error", None), ("ok", "yaml")]


async def test_the_reward_replays_an_augmented_rollout_on_the_instance_tier() -> None:
    record = executed_trajectory("bank", "pay_new_payee_chain")
    config = augmentation_for(
        "bank", seed=9, errors=1.0, formats=["xml"], distractors=1, catalog=load_catalog(), embed="tfidf"
    )
    record.meta["augmentation"] = {"bank": config.model_dump()}
    calls = [c.model_dump() for c in record.calls]
    rollout = [c for c in calls for _ in (0, 1)]
    async with Runtime() as rt:
        result = await Scorer(rt, isolation="instance").score(record, as_tool_call_tags(rollout))
    assert result.injected_errors == len(calls)
    assert (result.r_traj, result.r_state) == (1.0, 1.0)
