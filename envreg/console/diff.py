"""State changes as a table of dotted paths (added, removed, changed), from `envreg.validate.jsondiff`."""

from __future__ import annotations

from typing import Any

from envreg.console.html import e
from envreg.validate.jsondiff import _MISSING, differences, shown


def changes(before: Any, after: Any) -> list[tuple[str, str, str, str]]:
    """``(kind, path, before, after)`` for every leaf that differs; kind is added, removed or changed."""
    out = []
    for path, left, right in differences(before, after):
        kind = "added" if left is _MISSING else "removed" if right is _MISSING else "changed"
        out.append((kind, path, shown(left, 1000), shown(right, 1000)))
    return out


def diff_table(before: Any, after: Any) -> str:
    rows = changes(before, after)
    if not rows:
        return '<p class="muted state-diff" data-changes="0">no state change</p>'
    css = {"added": "diff-add", "removed": "diff-del", "changed": "diff-chg"}
    body = "".join(
        f'<tr class="{css[kind]}"><td>{kind}</td><td><code>{e(path)}</code></td>'
        f"<td><code>{e(left)}</code></td><td><code>{e(right)}</code></td></tr>"
        for kind, path, left, right in rows
    )
    return (
        f'<table class="state-diff" data-changes="{len(rows)}"><thead><tr><th></th><th>path</th><th>before</th>'
        f"<th>after</th></tr></thead><tbody>{body}</tbody></table>"
    )
