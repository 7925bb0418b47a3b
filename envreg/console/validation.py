"""A validation report (`envreg validate --json`) per environment and per check, with the failing evidence."""

from __future__ import annotations

from typing import Any

from envreg.console.data import DataFile
from envreg.console.html import Site, e, table

STATUS_CSS = {"pass": "ok", "fail": "bad", "skip": "muted"}


def validation_page(site: Site, data: DataFile, report: dict[str, Any]) -> str:
    envs = report.get("environments") or []
    verdict = '<span class="ok">passed</span>' if report.get("passed") else '<span class="bad">failed</span>'
    parts = [
        f"<p><code>{e(data.label)}</code> · {len(envs)} environments · {verdict} · {report.get('seconds', 0)} s</p>"
    ]
    summary_rows = []
    for env in envs:
        counts = env.get("counts") or {}
        summary_rows.append(
            [
                f'<a href="#env-{e(env.get("target", ""))}">{e(env.get("target", ""))}</a>',
                '<span class="ok">pass</span>' if env.get("passed") else '<span class="bad">fail</span>',
                *[str(counts.get(k, 0)) for k in ("pass", "fail", "skip")],
                f"<code>{e((env.get('image_id') or '')[:19])}</code>",
            ]
        )
    parts.append(
        table(["environment", "verdict", "pass", "fail", "skip", "image"], summary_rows, numeric=(2, 3, 4))
    )
    for env in envs:
        rows = []
        for check in env.get("checks") or []:
            status = str(check.get("status", ""))
            evidence = check.get("evidence") or []
            shown = "<pre>" + e("\n".join(map(str, evidence))) + "</pre>" if evidence else ""
            rows.append(
                [
                    f"<code>{e(check.get('name', ''))}</code>",
                    f'<span class="{STATUS_CSS.get(status, "")}">{e(status)}</span>',
                    e(check.get("summary", "")),
                    shown,
                    f"{check.get('seconds', 0)}",
                ]
            )
        error = f'<div class="error">{e(env["error"])}</div>' if env.get("error") else ""
        parts.append(
            f'<h2 id="env-{e(env.get("target", ""))}">{e(env.get("target", ""))}</h2>'
            f"<p class=muted>{e(env.get('name') or '')} {e(env.get('version') or '')} · manifest "
            f"<code>{e(env.get('manifest_digest') or '')}</code></p>{error}"
            + table(
                ["check", "status", "summary", "evidence", "seconds"],
                rows,
                numeric=(4,),
                attrs='class="checks"',
            )
        )
    return site.page(f"Validation: {data.label}", "".join(parts))
