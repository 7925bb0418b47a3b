"""Episode pages: a file's episodes (filtered, paged), and one episode turn by turn (messages, tool calls
with arguments and results, errors, the state diff of each turn), its reward breakdown per component and
per turn, its provenance, and beside it the oracle it is scored against."""

from __future__ import annotations

from typing import Any

from envreg.console.data import DataFile, EpisodeIndex, Summary, kind_of
from envreg.console.diff import diff_table
from envreg.console.html import Site, e, fmt, json_block, link, table

PAGE_SIZE = 50
COMPONENTS = ("reward", "r_traj", "r_state", "r_response", "r_answer", "p_length", "p_format")
COUNTS = (
    "expected_calls", "predicted_calls", "matched_calls", "malformed", "unknown_tools", "bad_arguments",
    "tool_errors", "injected_errors", "forbidden_calls",
)  # fmt: skip


def list_page(
    site: Site,
    data: DataFile,
    index: EpisodeIndex,
    rewards: dict[int, float],
    *,
    env: str = "",
    failure: str = "",
    min_reward: float | None = None,
    max_reward: float | None = None,
    page: int = 1,
) -> str:
    """`rewards` holds the rewards scored so far for episodes that store none (records and items)."""
    chosen = [
        s
        for s in index.select(env, failure)
        if _in_range(s.reward if s.reward is not None else rewards.get(s.index), min_reward, max_reward)
    ]
    pages = max(1, -(-len(chosen) // PAGE_SIZE))
    page = min(max(page, 1), pages)
    shown = chosen[(page - 1) * PAGE_SIZE : page * PAGE_SIZE]
    rows = [
        [
            str(s.index),
            link(site.url("data", data.id, str(s.index)), s.id),
            e(s.kind),
            e(", ".join(s.envs)),
            str(s.turns),
            fmt(s.reward if s.reward is not None else rewards.get(s.index)),
            f'<span class="bad">{e(s.failure)}</span>' if s.failure else "",
        ]
        for s in shown
    ]
    query = {"env": env, "failure": failure, "min": min_reward, "max": max_reward}
    pager = " ".join(
        f"<span>{p}</span>" if p == page else link(site.url("data", data.id, **query, page=p), p)
        for p in _page_numbers(page, pages)
    )
    body = (
        f"<p><code>{e(data.label)}</code> · {len(index)} episodes, {len(chosen)} shown by the filters · page "
        f"{page} of {pages}</p>"
        + ("" if site.static else _filters(site, data, index, env, failure, min_reward, max_reward))
        + table(
            ["#", "episode", "kind", "environments", "turns", "reward", "failure"], rows, numeric=(0, 4, 5)
        )
        + f'<nav class="pages">{pager}</nav>'
        + '<p class="muted">Records and items store no reward: theirs is scored (envreg.reward) when the episode is opened.</p>'
    )
    return site.page(data.label, body)


def _in_range(reward: float | None, low: float | None, high: float | None) -> bool:
    if low is None and high is None:
        return True
    if reward is None:
        return False
    return (low is None or reward >= low) and (high is None or reward <= high)


def _page_numbers(page: int, pages: int) -> list[int]:
    wanted = {1, pages, *range(page - 3, page + 4)}
    return sorted(p for p in wanted if 1 <= p <= pages)


def _filters(
    site: Site,
    data: DataFile,
    index: EpisodeIndex,
    env: str,
    failure: str,
    low: float | None,
    high: float | None,
) -> str:
    def select(name: str, values: list[str], chosen: str) -> str:
        options = '<option value="">any</option>' + "".join(
            f"<option{' selected' if v == chosen else ''}>{e(v)}</option>" for v in values
        )
        return f'<select name="{name}">{options}</select>'

    return (
        f'<form method="get" action="{e(site.url("data", data.id))}" class="filters">'
        f"<label>environment {select('env', index.envs(), env)}</label>"
        f"<label>failure {select('failure', index.failures(), failure)}</label>"
        f'<label>reward ≥ <input type="number" step="any" name="min" value="{"" if low is None else low}" size="5"></label>'
        f'<label>reward ≤ <input type="number" step="any" name="max" value="{"" if high is None else high}" size="5"></label>'
        "<button type=submit>Filter</button></form>"
    )


def reward_section(breakdown: dict[str, Any] | None, error: str | None = None) -> str:
    """The reward and each component, then each turn's, as `envreg reward score` computes them."""
    if error:
        return f'<div class="error reward-error">could not score: {e(error)}</div>'
    if not breakdown:
        return '<p class="muted">no reward</p>'
    headers = ["", *COMPONENTS, "gate"]
    rows = [["episode", *[fmt(breakdown.get(k)) for k in COMPONENTS], e(breakdown.get("gate") or "")]]
    for i, turn in enumerate(breakdown.get("turns") or [], 1):
        rows.append([f"turn {i}", *[fmt(turn.get(k)) for k in COMPONENTS], e(turn.get("gate") or "")])
    counts = table(list(COUNTS), [[str(breakdown.get(k, "")) for k in COUNTS]])
    missing = breakdown.get("missing") or []
    states = breakdown.get("states") or []
    state_rows = [
        [
            e(s["env"]),
            "equal" if s.get("equal") else '<span class="bad">differs</span>',
            fmt(s.get("score")),
            e(", ".join(s.get("differing", []))),
        ]
        for s in states
    ]
    return (
        table(
            headers,
            rows,
            numeric=tuple(range(1, 8)),
            attrs=f'class="reward" data-reward="{breakdown.get("reward")}"',
        )
        + counts
        + (f"<p>oracle calls not made: {e(', '.join(missing))}</p>" if missing else "")
        + (table(["environment", "final state", "score", "differing"], state_rows) if state_rows else "")
    )


def _call_rows(calls: list[dict[str, Any]]) -> str:
    if not calls:
        return '<p class="muted">no tool calls</p>'
    rows = []
    for c in calls:
        status = c.get("status") or ("error" if c.get("is_error") else "ok")
        css = "ok" if status == "ok" else "bad"
        result = c.get("result")
        result_text = result if isinstance(result, str) else json_block(result, 4000)
        rows.append(
            [
                f"<code>{e(c.get('env') or '')}{'.' if c.get('env') else ''}{e(c.get('tool') or c.get('name') or '')}</code>",
                json_block(c.get("arguments"), 4000),
                f'<span class="{css}">{e(status)}</span>',
                result_text if not isinstance(result, str) else f"<pre>{e(result[:4000])}</pre>",
            ]
        )
    return table(["call", "arguments", "status", "result"], rows)


def _messages(messages: list[dict[str, Any]]) -> str:
    out = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, list):
            content = " ".join(str(p.get("text", p)) if isinstance(p, dict) else str(p) for p in content)
        if content:
            out.append(f'<p><span class="pill">{e(m.get("role", "?"))}</span> {e(str(content)[:4000])}</p>')
    return "".join(out)


def turns_section(row: dict[str, Any]) -> str:
    """The turns of a rollout (EpisodeRecord) or a record (Trajectory), each with its calls and state diff."""
    parts = []
    previous = row.get("initial_states") or {}
    for i, turn in enumerate(row.get("turns") or [], 1):
        user = turn.get("user", turn.get("query", ""))
        body = f'<p><span class="pill">user</span> {e(user)}</p>' + _messages(turn.get("messages") or [])
        body += _call_rows(turn.get("calls") or [])
        if turn.get("answer"):
            body += f'<p><span class="pill">assistant</span> {e(turn["answer"])}</p>'
        states = turn.get("states") or {}
        for env_name, state in states.items():
            body += f"<h3>state diff: {e(env_name)}</h3>" + diff_table(previous.get(env_name, {}), state)
        if states:
            previous = {**previous, **states}
        if turn.get("state_sha256"):
            body += (
                "<p class=muted>state after: "
                + ", ".join(f"{e(k)} <code>{e(str(v)[:16])}</code>" for k, v in turn["state_sha256"].items())
                + "</p>"
            )
        if isinstance(turn.get("reward"), dict):
            body += "<h3>turn reward</h3>" + reward_section(turn["reward"])
        stop = turn.get("stop")
        if stop and stop != "answered":
            body += f'<p class="bad">stopped: {e(stop)}</p>'
        parts.append(f'<div class="card turn"><h3>Turn {i}</h3>{body}</div>')
    return "".join(parts) or '<p class="muted">no turns</p>'


def provenance_section(row: dict[str, Any]) -> str:
    keys = ("envs", "initial_state_sha256", "final_state_sha256", "snapshot_ids", "model", "sampling", "task_id",
            "task_source", "trial", "group", "seed", "query_source", "record_version")  # fmt: skip
    shown = {k: row[k] for k in keys if row.get(k) not in (None, "", [], {})}
    return json_block(shown) if shown else '<p class="muted">none recorded</p>'


def _output_section(output: Any) -> str:
    if isinstance(output, list):
        return _messages([m for m in output if isinstance(m, dict)]) + json_block(output, 20_000)
    return f"<pre>{e(output if isinstance(output, str) else str(output))}</pre>"


def episode_page(
    site: Site,
    data: DataFile,
    summary: Summary,
    row: Any,
    breakdown: dict[str, Any] | None,
    error: str | None,
) -> str:
    """One episode; `breakdown` is the stored reward (rollouts) or the one just scored (records, items)."""
    kind = kind_of(row)
    head = (
        f"<p>{link(site.url('data', data.id), data.label)} · episode {summary.index} · {e(kind)} · "
        f"environments {e(', '.join(summary.envs) or '?')}</p>"
    )
    if isinstance(row, dict) and kind == "rollout":
        passed = (
            '<span class="ok">passed</span>' if row.get("passed") else '<span class="bad">not passed</span>'
        )
        stop = row.get("stop", "answered")
        head += f"<p>{passed} · " + (
            f'<span class="bad">stopped: {e(stop)}</span>' if stop != "answered" else "answered"
        )
        head += f" · model <code>{e(row.get('model') or '?')}</code></p>"
        if row.get("error"):
            head += f'<div class="error">{e(row["error"])}</div>'
    reward = "<h2>Reward</h2>" + reward_section(breakdown, error)
    if kind == "item":
        record = row.get("record", row.get("ground_truth"))
        record = record if isinstance(record, dict) else {}
        output = row.get("output", row.get("response"))
        oracle_label = (
            "the record's own calls (scored with --oracle)" if output is None else "the model's output"
        )
        scored = (breakdown or {}).get("calls") or []
        scored_rows = [
            [
                f"<code>{e(c.get('env') or '?')}.{e(c.get('tool'))}</code>",
                e(c.get("status")),
                "yes" if c.get("matched") else '<span class="bad">no</span>',
            ]
            for c in scored
        ]
        calls = (
            table(["call", "status", "matches an oracle call"], scored_rows, attrs='class="scored-calls"')
            if scored_rows
            else ""
        )
        body = (
            head + reward + "<div class=cols><div>"
            f"<h2>Episode: {oracle_label}</h2>"
            + calls
            + (
                _output_section(output)
                if output is not None
                else turns_section(record) or _call_rows(record.get("calls") or [])
            )
            + "</div><div><h2>Oracle (the record)</h2>"
            + (turns_section(record) if record.get("turns") else _call_rows(record.get("calls") or []))
            + "</div></div><h2>Provenance</h2>"
            + provenance_section(record)
        )
    else:
        body = (
            head
            + reward
            + "<h2>Turns</h2>"
            + turns_section(row)
            + "<h2>Provenance</h2>"
            + provenance_section(row)
        )
    body += f"<details><summary>the whole line as JSON</summary>{json_block(row)}</details>"
    return site.page(f"Episode {summary.id}", body)
