"""Sandbox pages: the daemon's live sandboxes, and one sandbox with the console's call log (each call's
result and the state diff after it), snapshot, fork and stop, and a form per tool to play it as the agent."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from envreg.canonical import canonical_json
from envreg.console.diff import diff_table
from envreg.console.forms import tool_form
from envreg.console.html import Site, e, json_block, link, table


@dataclass
class CallEntry:
    tool: str
    arguments: dict[str, Any]
    result: dict[str, Any]  # MCP CallToolResult
    before: dict[str, Any]
    after: dict[str, Any]
    at: float = field(default_factory=time.time)


@dataclass
class SandboxLog:
    """What the console knows of a sandbox beyond the runtime: when it saw it first, the calls made from the
    console (an agent's calls over MCP go straight to the environment and are not in it), its snapshots."""

    seen: float = field(default_factory=time.time)
    calls: list[CallEntry] = field(default_factory=list)
    snapshots: list[str] = field(default_factory=list)


def _ago(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    return f"{seconds // 3600} h"


def list_page(site: Site, rows: list[tuple[Any, SandboxLog, int | None]]) -> str:
    """`rows`: (sandbox, its log, its state's size in bytes or None when it could not be read)."""
    now = time.time()
    cells = [
        [
            link(site.url("sandboxes", sb.id), sb.id),
            link(site.url("env", sb.env), sb.env),
            e(sb.isolation),
            _ago(now - log.seen),
            "none" if sb.expires_at is None else f"{_ago(sb.expires_at - now)} left",
            str(len(log.calls)),
            "?" if size is None else f"{size:,} B",
        ]
        for sb, log, size in rows
    ]
    body = (
        f"<p>{len(rows)} live sandboxes. Start one from an environment's page in the "
        f"{link(site.url('catalog'), 'catalog')}.</p>"
        + table(
            ["sandbox", "environment", "tier", "age", "lease", "calls", "state size"],
            cells,
            numeric=(5, 6),
            attrs='class="sandboxes"',
        )
        + '<p class="muted">Age counts from when this daemon\'s console first saw the sandbox; calls are those made from the console.</p>'
    )
    return site.page("Sandboxes", body)


def state_size(state: dict[str, Any]) -> int:
    return len(canonical_json(state))


def sandbox_page(
    site: Site, sb: Any, log: SandboxLog, tools: list[dict[str, Any]], state: dict[str, Any], notice: str = ""
) -> str:
    base = ("sandboxes", sb.id)
    actions = (
        f'<form class="inline" method="post" action="{e(site.url(*base, "snapshot"))}"><button>Snapshot</button></form> '
        f'<form class="inline" method="post" action="{e(site.url(*base, "fork"))}"><button>Fork</button></form> '
        f'<form class="inline" method="post" action="{e(site.url(*base, "stop"))}"><button class="secondary">Stop</button></form>'
    )
    snaps = "".join(f"<li><code>{e(s)}</code></li>" for s in log.snapshots)
    entries = []
    for i, call in enumerate(log.calls, 1):
        error = call.result.get("isError")
        text = " ".join(str(c.get("text", "")) for c in call.result.get("content", []) if isinstance(c, dict))
        result = call.result.get("structuredContent")
        entries.append(
            f'<div class="card call" data-call="{i}"><h3>{i}. <code>{e(call.tool)}</code> '
            f'<span class="{"bad" if error else "ok"}">{"error" if error else "ok"}</span></h3>'
            f"<div class=cols><div><b>arguments</b>{json_block(call.arguments, 8000)}</div>"
            f"<div><b>result</b>{json_block(result, 8000) if result is not None else f'<pre>{e(text[:8000])}</pre>'}</div></div>"
            f"<b>state change</b>{diff_table(call.before, call.after)}</div>"
        )
    forms = "".join(
        f'<details class="play" data-tool="{e(t["name"])}"><summary><code>{e(t["name"])}</code> '
        f'<span class="muted">{e((t.get("description") or "")[:90])}</span></summary>'
        f"{tool_form(t, site.url(*base, 'call'))}</details>"
        for t in tools
    )
    body = (
        (f'<div class="card notice">{notice}</div>' if notice else "")
        + f"<p>{link(site.url('env', sb.env), sb.env)} · {e(sb.isolation)} tier · <code>{e(sb.env_digest[:19])}</code>"
        + (f" · MCP <code>{e(sb.mcp_url)}</code>" if sb.mcp_url else "")
        + f"</p><p>{actions}</p>"
        + (f"<h2>Snapshots</h2><ul>{snaps}</ul>" if snaps else "")
        + "<div class=cols><div><h2>Play as the agent</h2>"
        + forms
        + "</div>"
        + f"<div><h2>Call log</h2>{''.join(reversed(entries)) or '<p class=muted>no calls yet</p>'}</div></div>"
        + f"<h2>State</h2>{json_block(state, 60_000)}"
    )
    return site.page(f"Sandbox {sb.id}", body)
