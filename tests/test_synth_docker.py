"""Synthesis on the Docker tiers: trajectories executed in containers replay byte for byte (on the
container tier and on the local tier), and pass@k solving talks MCP through the sandboxes' URLs."""

from __future__ import annotations

import anyio
import pytest
from synth_helpers import ScriptedModel, catalog_graph

from envreg.runtime import Runtime
from envreg.standin import StandInLLM
from envreg.synth.execute import Synthesizer
from envreg.synth.llm import LLMConfig
from envreg.synth.replay import replay

pytestmark = pytest.mark.docker


def test_container_tier_trajectories_replay_on_every_tier(reference_images) -> None:
    async def main():
        async with Runtime(pool={"container": 2}) as rt:
            synth = Synthesizer(
                rt, catalog_graph(), isolation="container", seed=21, envs=["calendar", "bank"]
            )
            result = await synth.run(3, concurrency=2)
            container = [await replay(rt, t, "container") for t in result.trajectories]
            local = [await replay(rt, t, "local") for t in result.trajectories]
            return result.trajectories, container, local

    trajectories, container, local = anyio.run(main)
    assert len(trajectories) == 3
    for t in trajectories:
        assert t.meta["isolation"] == "container"
        assert all(e.image_digest and e.image_digest.startswith("sha256:") for e in t.envs)
    assert [r.mismatches for r in container] == [[], [], []]
    assert [r.mismatches for r in local] == [[], [], []]


def test_pass_at_k_over_the_sandboxes_mcp_urls(reference_images) -> None:
    model = ScriptedModel()
    with StandInLLM(model) as server:
        llm = LLMConfig(base_url=server.base_url, model="standin", attempts=2)

        async def main():
            async with Runtime(pool={"instance": 4}) as rt:
                synth = Synthesizer(
                    rt, catalog_graph(), isolation="instance", seed=8, envs=["calendar"], llm=llm, k=3
                )
                result = await synth.run(1, concurrency=1)
                return result, [await replay(rt, t, "instance") for t in result.trajectories]

        result, reports = anyio.run(main)
        solver_requests = [r for r in server.requests if r.get("tools")]
    (t,) = result.trajectories
    assert t.query_source == "llm" and t.meta["pass_at_k"]["passed"] == 1
    assert reports[0].ok, reports[0].mismatches
    listed = {tool["function"]["name"] for tool in solver_requests[0]["tools"]}
    assert {"list_events", "create_event", "get_event"} <= listed, "tools listed over MCP"
