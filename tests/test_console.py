"""The web console (`/ui`) rendered in process over an ASGI transport (no sockets), on the local tier, and
`envreg report --html` written to a folder."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import httpx2
import pytest
from conftest import ROOT, installed, scaled
from console_helpers import (
    EVENT,
    reward_score_json,
    write_graph,
    write_items,
    write_trajectory,
    write_validation,
)

from envreg.console.data import EpisodeIndex
from envreg.daemon.app import DaemonSettings, create_app
from envreg.runtime import Runtime

pytestmark = pytest.mark.anyio
FORM = {"content-type": "application/x-www-form-urlencoded"}
HOST = "console.test"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def data(tmp_path: Path) -> Path:
    if not installed("networkx"):
        pytest.skip("the data folder holds a tool graph, which needs networkx (pip install 'envreg[synth]')")
    folder = tmp_path / "data"
    folder.mkdir()
    write_items(folder / "items.jsonl")
    write_trajectory(folder / "trajectories.jsonl")
    write_validation(folder / "validate.json")
    write_graph(folder / "tool-graph.json")
    return folder


@pytest.fixture
async def client(data: Path) -> AsyncIterator[httpx2.AsyncClient]:
    """A browser-like client of the daemon app over the local tier, not yet signed in."""
    async with Runtime(gateway=False) as rt, httpx2.AsyncClient() as upstream:
        rt.gateway_url = f"http://{HOST}"
        settings = DaemonSettings(token="secret", tiers=("local",), ui_data=(data,), allowed_hosts=(HOST,))
        app = create_app(rt, settings, upstream)
        async with httpx2.AsyncClient(
            transport=httpx2.ASGITransport(app=app), base_url=f"http://{HOST}"
        ) as c:
            yield c


async def sign_in(client: httpx2.AsyncClient) -> None:
    response = await client.get("/ui/catalog?token=secret")
    assert response.status_code == 303 and response.headers["location"] == "/ui/catalog"
    client.cookies.set("envreg_console", response.cookies["envreg_console"])


async def page(client: httpx2.AsyncClient, path: str) -> str:
    response = await client.get(path)
    assert response.status_code == 200, response.text[:2000]
    assert "text/html" in response.headers["content-type"]
    return response.text


def file_ids(html: str) -> dict[str, str]:
    """label -> id of each data file the Data page lists."""
    return {
        label: fid for fid, label in re.findall(r'href="/ui/data/([0-9a-f]{12})">[^<]*?/?([^/<]+)</a>', html)
    }


async def test_the_console_needs_the_daemon_token(client: httpx2.AsyncClient) -> None:
    refused = await client.get("/ui/")
    assert refused.status_code == 401 and 'name="token"' in refused.text, "the sign-in form, with a 401"
    assert (await client.get("/ui/catalog?token=wrong")).status_code == 401
    assert (await client.get("/ui/env/calendar")).status_code == 401
    response = await client.get("/ui/catalog?token=secret")
    cookie = response.headers["set-cookie"]
    assert response.status_code == 303 and "HttpOnly" in cookie and "SameSite=strict" in cookie
    assert "secret" not in cookie, "the cookie is derived from the token, not the token"
    client.cookies.set("envreg_console", response.cookies["envreg_console"])
    assert (await client.get("/ui/")).status_code == 200
    assert (await client.get("/v1/healthz")).status_code == 401, "the cookie is no key to the REST API"
    client.cookies.clear()
    huge = await client.post("/ui/login", content=b"token=" + b"x" * (17 << 20), headers=FORM)
    assert huge.status_code == 413, "the console's bodies are capped like the API's"
    wrong = await client.post("/ui/login", content="token=nope", headers=FORM)
    assert wrong.status_code == 401
    login = await client.post("/ui/login", content="token=secret", headers=FORM)
    assert login.status_code == 303 and "envreg_console" in login.cookies
    bearer = await client.get("/ui/catalog", headers={"authorization": "Bearer secret"})
    assert bearer.status_code == 200


async def test_catalog_pages_show_environments_tools_schemas_and_scenarios(
    client: httpx2.AsyncClient,
) -> None:
    await sign_in(client)
    catalog = await page(client, "/ui/catalog")
    manifests = sorted(p.stem for p in (ROOT / "manifests").glob("*.json"))
    for name in manifests:
        assert f'href="/ui/env/{name}"' in catalog
    env = await page(client, "/ui/env/calendar")
    calendar = json.loads((ROOT / "manifests" / "calendar.json").read_text())
    assert calendar["digests"]["manifest"] in env and calendar["version"] in env
    for tool in calendar["tools"]:
        assert f'href="/ui/env/calendar/tool/{tool["name"]}"' in env
    for scenario in (ROOT / "images" / "calendar" / "scenarios").glob("*.json"):
        assert f"<td>{scenario.stem}</td>" in env
    for rejected in (ROOT / "images" / "calendar" / "scenarios" / "rejected").glob("*.json"):
        assert f"<td>{rejected.stem}</td>" in env
    tool = await page(client, "/ui/env/calendar/tool/create_event")
    for field in ("calendar_id", "title", "start", "end", "location"):
        assert f'data-arg="{field}"' in tool, "each input property is a form field"
    assert "&quot;required&quot;" in tool, "and the schema is shown as JSON"
    hits = await page(client, "/ui/search?q=reschedule+event")
    assert 'href="/ui/env/calendar/tool/reschedule_event"' in hits
    assert "create_event" not in hits


async def test_a_domain_graph_links_each_tool(client: httpx2.AsyncClient) -> None:
    await sign_in(client)
    graph = await page(client, "/ui/graph/office")
    assert "<svg" in graph
    for tool in ("list_calendars", "create_event", "delete_event"):
        assert f'href="/ui/env/calendar/tool/{tool}"' in graph
    assert graph.count("<line") == 2


async def test_play_a_sandbox_from_the_form_and_see_each_state_change(client: httpx2.AsyncClient) -> None:
    await sign_in(client)
    refused = await client.post("/ui/env/calendar/sandbox", content="isolation=container", headers=FORM)
    assert refused.status_code == 400 and "not enabled on this daemon" in refused.text
    started = await client.post("/ui/env/calendar/sandbox", content="isolation=local", headers=FORM)
    assert started.status_code == 303
    url = started.headers["location"]
    listed = await page(client, "/ui/sandboxes")
    assert url in listed and "local" in listed
    arguments = json.dumps(EVENT)
    called = await client.post(
        f"{url}/call",
        content=httpx2.QueryParams(tool="create_event", arguments=arguments).__str__(),
        headers=FORM,
    )
    assert called.status_code == 303
    shown = await page(client, url)
    assert 'data-changes="0"' not in shown
    event = re.search(r"<td>added</td><td><code>events\.(evt_\d+)</code>", shown)
    assert event, "the new event appears in the state diff as added"
    assert "Console test" in shown
    await client.post(
        f"{url}/call",
        content=str(
            httpx2.QueryParams(tool="delete_event", arguments=json.dumps({"event_id": event.group(1)}))
        ),
        headers=FORM,
    )
    shown = await page(client, url)
    assert shown.count('class="card call"') == 2
    assert f"<td>removed</td><td><code>events.{event.group(1)}</code>" in shown, (
        "the deletion shows as removed"
    )
    bad = await client.post(f"{url}/call", content="tool=create_event&arguments=%7Bnope", headers=FORM)
    assert bad.status_code == 400 and "not valid JSON" in bad.text
    snap = await client.post(f"{url}/snapshot", headers=FORM)
    assert snap.status_code == 303 and "sha256" in snap.headers["location"]
    forked = await client.post(f"{url}/fork", headers=FORM)
    fork_url = forked.headers["location"]
    assert forked.status_code == 303 and fork_url.split("?")[0] != url
    stopped = await client.post(f"{url}/stop", headers=FORM)
    assert stopped.status_code == 303
    assert (await client.get(url)).status_code == 404
    assert fork_url.split("?")[0] in await page(client, "/ui/sandboxes")


async def test_an_episode_shows_the_reward_envreg_reward_score_gives(
    client: httpx2.AsyncClient, data: Path
) -> None:
    await sign_in(client)
    listing = await page(client, "/ui/data")
    ids = file_ids(listing)
    assert set(ids) == {"items.jsonl", "trajectories.jsonl", "validate.json"}
    assert "tool-graph.json</a>" in listing, "the graph is listed too (it links to the catalog's graphs)"
    expected = await anyio.to_thread.run_sync(reward_score_json, data / "items.jsonl")
    for n, want in enumerate(expected):
        shown = await page(client, f"/ui/data/{ids['items.jsonl']}/{n}")
        assert f'data-reward="{want["reward"]}"' in shown
        first_row = re.search(r'class="reward".*?<tbody><tr>(.*?)</tr>', shown, re.S).group(1)
        cells = re.findall(r"<td[^>]*>(.*?)</td>", first_row)
        keys = ("reward", "r_traj", "r_state", "r_response", "r_answer", "p_length", "p_format")
        assert cells[1:8] == [f"{want[k]:.3f}" for k in keys]
        assert "Oracle (the record)" in shown
    assert expected[1]["reward"] < 1.0
    listing = await page(client, f"/ui/data/{ids['items.jsonl']}?min=0.99")
    assert listing.count('href="/ui/data/') >= 1 and f"/ui/data/{ids['items.jsonl']}/1" not in listing
    record = await page(client, f"/ui/data/{ids['trajectories.jsonl']}/0")
    assert 'data-reward="1.0"' in record, "a record scored with --oracle earns 1"
    assert "state diff: calendar" in record and "<td>added</td>" in record


FOREIGN_ENV = """
import pathlib
pathlib.Path(__file__).with_name("imported").write_text("env.py ran")
"""


async def test_an_episode_naming_a_folder_outside_the_catalog_is_not_scored_and_imports_nothing(
    client: httpx2.AsyncClient, data: Path, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere" / "bank"
    elsewhere.mkdir(parents=True)
    (elsewhere / "env.py").write_text(FOREIGN_ENV)
    item = json.loads((data / "items.jsonl").read_text().splitlines()[0])
    item["record"] = json.loads(json.dumps(item["record"]).replace('"bank"', json.dumps(str(elsewhere))))
    (data / "foreign.jsonl").write_text(json.dumps(item) + "\n")
    await sign_in(client)
    shown = await page(client, f"/ui/data/{file_ids(await page(client, '/ui/data'))['foreign.jsonl']}/0")
    assert "could not score" in shown and "is not in this server&#x27;s catalog" in shown, shown[-3000:]
    assert "name one of those" in shown
    assert not (elsewhere / "imported").exists(), "the record's folder was imported on the host"


async def test_a_validation_report_shows_each_check_and_the_failing_evidence(
    client: httpx2.AsyncClient,
) -> None:
    await sign_in(client)
    ids = file_ids(await page(client, "/ui/data"))
    shown = await page(client, f"/ui/data/{ids['validate.json']}")
    assert "deterministic" in shown and '<span class="bad">fail</span>' in shown
    assert "events.evt_0001.start: 1 (run 1) vs 2 (run 2)" in shown


async def test_the_console_reads_only_the_folders_it_was_given(client: httpx2.AsyncClient) -> None:
    await sign_in(client)
    assert (await client.get("/ui/data/000000000000")).status_code == 404
    assert (await client.get("/ui/data/..%2F..%2Fetc%2Fpasswd")).status_code == 404


def test_a_rollout_shows_its_turns_its_stored_reward_and_why_it_failed(tmp_path: Path) -> None:
    from envreg.console.data import DataFiles
    from envreg.console.episodes import episode_page, list_page
    from envreg.console.html import Site
    from envreg.reward.score import RewardBreakdown
    from envreg.rollout.record import CallRecord, EnvProvenance, EpisodeRecord, TurnRecord

    reward = RewardBreakdown(reward=0.25, r_traj=0.5, r_state=0.0, p_length=0.0, p_format=0.0, expected_calls=2,
                             predicted_calls=1, matched_calls=1, gate="forbidden_tool")  # fmt: skip
    call = CallRecord(name="get_balance", env="bank", tool="get_balance", arguments={"account_id": "acc_9"},
                      status="error", result="no account acc_9")  # fmt: skip
    record = EpisodeRecord(
        id="ep_1",
        task_id="bank/x",
        envs=[
            EnvProvenance(name="bank", isolation="local", digest="sha256:abc", final_state_sha256="f" * 64)
        ],
        turns=[TurnRecord(user="What is my balance?", calls=[call], state_sha256={"bank": "e" * 64})],
        reward=reward,
        stop="step_limit",
    )
    (tmp_path / "rollouts.jsonl").write_text(record.model_dump_json() + "\n")
    files = DataFiles(folders=(tmp_path,))
    (data,) = files.scan()
    index = files.index(data)
    assert index.summaries[0].failure == "forbidden_tool" and index.summaries[0].reward == 0.25
    listed = list_page(Site(), data, index, {}, failure="forbidden_tool")
    assert "ep_1" in listed and "0.250" in listed
    html = episode_page(Site(), data, index.summaries[0], index.row(0), index.row(0)["reward"], None)
    assert 'data-reward="0.25"' in html and "What is my balance?" in html
    assert "no account acc_9" in html and '<span class="bad">error</span>' in html
    assert "stopped: step_limit" in html and "sha256:abc" in html


def test_serve_refuses_a_ui_data_folder_that_is_not_one(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "envreg.cli.main", "serve", "--port", "0", "--ui-data", str(tmp_path / "nope")],
        cwd=ROOT, capture_output=True, text=True, timeout=120, env={**__import__("os").environ, "ENVREG_HOME": str(tmp_path)},
    )  # fmt: skip
    assert proc.returncode == 2 and "--ui-data" in proc.stderr and "not a folder" in proc.stderr


def test_a_big_file_is_indexed_once_and_paged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from envreg.console.data import DataFiles
    from envreg.console.episodes import PAGE_SIZE, list_page
    from envreg.console.html import Site

    line = json.dumps({"id": "x", "task_id": "t", "envs": [{"name": "bank", "isolation": "local", "digest": "d"}],
                       "turns": [], "reward": {"reward": 0.5}, "passed": False})  # fmt: skip
    (tmp_path / "rollouts.jsonl").write_text((line + "\n") * 120)
    builds = []
    real = EpisodeIndex.build
    monkeypatch.setattr(
        EpisodeIndex, "build", classmethod(lambda cls, p: builds.append(p) or real.__func__(cls, p))
    )
    files = DataFiles(folders=(tmp_path,))
    (data,) = files.scan()
    index = files.index(data)
    assert files.index(data) is index and len(builds) == 1
    last = list_page(Site(), data, index, {}, page=3)
    assert last.count("<tr>") - 1 == 120 - 2 * PAGE_SIZE
    assert "not passed" in last
    assert list_page(Site(), data, index, {}, env="calendar").count("<tr>") == 1, "only the header row"


def test_report_writes_static_pages_whose_links_all_resolve(tmp_path: Path, data: Path) -> None:
    out = tmp_path / "report"
    proc = subprocess.run(
        [sys.executable, "-m", "envreg.cli.main", "report", str(data / "items.jsonl"), str(data / "validate.json"),
         str(data / "tool-graph.json"), "--html", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    pages = sorted(out.glob("*.html"))
    assert (out / "index.html").is_file() and (out / "static" / "console.css").is_file()
    for path in pages:
        html = path.read_text()
        for href in re.findall(r'(?:href|src)="(?!data:)([^"#]+)', html):
            assert (out / href).is_file(), f"{path.name} links to {href}, which was not written"
    expected = reward_score_json(data / "items.jsonl")
    episode = next(p for p in pages if p.name.endswith("-1.html") and p.name.startswith("data-"))
    assert f'data-reward="{expected[1]["reward"]}"' in episode.read_text()
    assert "<form" not in (out / "env-calendar-tool-create_event.html").read_text().replace(
        '<form class="tool preview">', ""
    )
    bad = subprocess.run(
        [sys.executable, "-m", "envreg.cli.main", "report", str(tmp_path / "missing.jsonl"), "--html", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert bad.returncode == 2 and "no such file" in bad.stderr


@pytest.mark.slow
def test_a_5000_episode_file_is_read_once_and_each_page_reads_only_its_lines(tmp_path: Path) -> None:
    from envreg.console.data import DataFiles
    from envreg.console.episodes import list_page
    from envreg.console.html import Site

    n = scaled(5000, 500)
    turn = {
        "user": "u",
        "calls": [{"name": "t", "arguments": {"x": "y" * 200}, "status": "ok", "result": "r" * 500}],
    }
    with (tmp_path / "rollouts.jsonl").open("w") as f:
        for i in range(n):
            envs = [{"name": "bank" if i % 2 else "shop", "isolation": "local", "digest": "d"}]
            row = {"id": f"ep{i}", "task_id": "t", "envs": envs, "turns": [turn] * 5,
                   "reward": {"reward": (i % 10) / 10}, "passed": i % 10 == 9}  # fmt: skip
            f.write(json.dumps(row) + "\n")
    files = DataFiles(folders=(tmp_path,))
    (data,) = files.scan()
    index = files.index(data)
    assert len(index) == n and index.rows is None, "JSON Lines are kept as offsets, not in memory"
    assert index.row(n - 1)["id"] == f"ep{n - 1}"
    chosen = index.select(env="bank")
    assert len(chosen) == n // 2
    html = list_page(Site(), data, index, {}, env="bank", min_reward=0.85)
    assert html.count("<tr>") - 1 == min(50, n // 10)
    assert f">ep{n - 1}<" in list_page(Site(), data, index, {}, page=n // 50)
