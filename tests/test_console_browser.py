"""The web console in a real browser (Debian's headless Chromium driven by Playwright) against a real daemon
with container sandboxes: every page loads, two tool calls played through the form show their state
changes, an episode's reward breakdown is `envreg reward score`'s, and `/ui` without the token is refused.

Screenshots of each page are kept under .cache/ui-screenshots/ (a CI artifact)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT
from console_helpers import (
    EVENT,
    reward_score_json,
    write_graph,
    write_items,
    write_trajectory,
    write_validation,
)
from daemon_helpers import DaemonProcess

CHROMIUM = Path("/usr/bin/chromium")
SHOTS = ROOT / ".cache" / "ui-screenshots"
pytestmark = [
    pytest.mark.docker,
    pytest.mark.skipif(not CHROMIUM.is_file(), reason="needs Debian's chromium (scripts/test installs it)"),
]


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("ui-data")
    write_items(folder / "items.jsonl")
    write_trajectory(folder / "trajectories.jsonl")
    write_validation(folder / "validate.json")
    write_graph(folder / "tool-graph.json")
    return folder


@pytest.fixture(scope="module")
def daemon(
    tmp_path_factory: pytest.TempPathFactory, reference_images: Any, data: Path
) -> Iterator[DaemonProcess]:
    proc = DaemonProcess(
        tmp_path_factory.mktemp("console-home"),
        extra=["--tiers", "instance,container", "--ui-data", str(data)],
    ).start()
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser: Any, daemon: DaemonProcess) -> Iterator[Any]:
    """A signed-in page (the sign-in form filled with the daemon token); page errors fail the test."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    tab = context.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda exc: errors.append(str(exc)))
    tab.goto(f"{daemon.url}/ui/login")
    tab.fill("input[name=token]", daemon.token)
    tab.click("button[type=submit]")
    tab.wait_for_url(f"{daemon.url}/ui/")
    yield tab
    context.close()
    assert not errors, f"script errors: {errors}"


def shot(tab: Any, name: str) -> None:
    tab.screenshot(path=str(SHOTS / f"{name}.png"), full_page=False)


def test_the_console_without_the_token_is_refused(browser: Any, daemon: DaemonProcess) -> None:
    context = browser.new_context()
    tab = context.new_page()
    for path in ("/ui", "/ui/", "/ui/catalog", "/ui/sandboxes"):
        response = tab.goto(daemon.url + path)
        assert response.status == 401, path
        assert tab.locator("input[name=token]").is_visible()
    assert tab.goto(f"{daemon.url}/ui/?token=wrong").status == 401
    shot(tab, "login")
    response = tab.goto(f"{daemon.url}/ui/catalog?token={daemon.token}")
    assert response.status == 200 and tab.url == f"{daemon.url}/ui/catalog", (
        "the token is dropped from the URL"
    )
    cookie = next(c for c in context.cookies() if c["name"] == "envreg_console")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    context.close()


def test_every_page_loads(page: Any, daemon: DaemonProcess) -> None:
    pages = {
        "home": "/ui/",
        "catalog": "/ui/catalog",
        "environment": "/ui/env/calendar",
        "tool": "/ui/env/calendar/tool/create_event",
        "search": "/ui/search?q=event",
        "graph": "/ui/graph/office",
        "sandboxes": "/ui/sandboxes",
        "data": "/ui/data",
    }
    for name, path in pages.items():
        response = page.goto(daemon.url + path)
        assert response.status == 200, f"{path}: {response.status}"
        assert page.locator("h1").is_visible()
        shot(page, name)
    page.goto(f"{daemon.url}/ui/data")
    links = [a.get_attribute("href") for a in page.locator("main table a").all()]
    for n, href in enumerate(links):
        assert page.goto(daemon.url + href).status == 200, href
        shot(page, f"data-{n}-{page.locator('h1').inner_text().split('/')[-1].split('.')[0]}")
        if "/ui/data/" in href:
            first = page.locator("main table a[href^='/ui/data/']").first
            if first.count():
                first.click()
                page.wait_for_load_state()
                assert page.locator("h1").inner_text().startswith("Episode")
                shot(page, f"episode-{n}")
    page.goto(f"{daemon.url}/ui/graph/office")
    page.locator("a.tool-node[data-tool='calendar/create_event']").click()
    page.wait_for_url(re.compile(r".*/ui/env/calendar/tool/create_event$"))


def test_play_two_calls_through_the_form_and_see_the_state_diffs(page: Any, daemon: DaemonProcess) -> None:
    page.goto(f"{daemon.url}/ui/env/calendar")
    page.select_option("select[name=isolation]", "container")
    page.click("text=Start a sandbox and play it")
    page.wait_for_url(re.compile(r".*/ui/sandboxes/sb_[0-9a-f]+$"))
    sandbox_url = page.url
    form = page.locator("details[data-tool=create_event]")
    form.locator(":scope > summary").click()
    for name, value in EVENT.items():
        form.locator(f"[data-arg={name}]").fill(value)
    form.locator("button[type=submit]").click()
    # the call's card is on the page the form returns to: a wait on it, not on the URL, which is already
    # the sandbox's while the form posts (wait_for_url then waits only on a load state)
    first = page.locator(".card.call[data-call='1']")
    first.wait_for()
    assert page.url == sandbox_url
    assert first.locator(".ok").first.inner_text() == "ok"
    added = first.locator("table.state-diff tr.diff-add code").first.inner_text()
    event_id = re.fullmatch(r"events\.(evt_\d+)", added).group(1)
    assert "Console test" in first.locator("table.state-diff").inner_text()
    form = page.locator("details[data-tool=delete_event]")
    form.locator(":scope > summary").click()
    form.locator("[data-arg=event_id]").fill(event_id)
    form.locator("button[type=submit]").click()
    second = page.locator(".card.call[data-call='2']")
    second.wait_for()
    assert page.url == sandbox_url
    assert second.locator("table.state-diff tr.diff-del code").first.inner_text() == f"events.{event_id}"
    page.locator("details[data-tool=create_event] > summary").click()
    shot(page, "sandbox")
    page.goto(f"{daemon.url}/ui/sandboxes")
    row = page.locator("table.sandboxes tr", has_text=sandbox_url.rsplit("/", 1)[1])
    assert "container" in row.inner_text() and re.search(r"\b2\b", row.inner_text()), "tier and the 2 calls"
    page.goto(sandbox_url)
    page.click("button:text('Snapshot')")
    page.wait_for_load_state()
    assert re.search(r"snapshot sha256:[0-9a-f]{64}", page.locator(".notice").inner_text())
    page.click("button:text('Fork')")
    page.wait_for_url(re.compile(r".*/ui/sandboxes/sb_[0-9a-f]+\?notice=.*"))
    fork_url = page.url.split("?")[0]
    assert fork_url != sandbox_url and "forked from" in page.locator(".notice").inner_text()
    assert "container tier" in page.locator("main p").first.inner_text()
    for url in (fork_url, sandbox_url):
        page.goto(url)
        page.click("button:text('Stop')")
        page.wait_for_url(f"{daemon.url}/ui/sandboxes")
        assert url.rsplit("/", 1)[1] not in page.content()


def test_an_episode_shows_the_reward_breakdown_envreg_reward_score_gives(
    page: Any, daemon: DaemonProcess, data: Path
) -> None:
    expected = reward_score_json(data / "items.jsonl")
    page.goto(f"{daemon.url}/ui/data")
    page.click("text=items.jsonl")
    listing = page.url
    keys = ("reward", "r_traj", "r_state", "r_response", "r_answer", "p_length", "p_format")
    for n, want in enumerate(expected):
        page.goto(f"{listing}/{n}")
        cells = page.locator("table.reward tbody tr").first.locator("td").all_inner_texts()
        assert cells[1:8] == [f"{want[k]:.3f}" for k in keys], f"episode {n}"
        turns = page.locator("table.reward tbody tr").count() - 1
        assert turns == len(want.get("turns") or [])
    shot(page, "episode")
    page.goto(listing)
    assert f"{expected[1]['reward']:.3f}" in page.locator("main table").first.inner_text(), (
        "rewards scored so far"
    )
