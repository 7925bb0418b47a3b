"""A tool's input schema as an HTML form (the console's script turns its fields into JSON arguments),
and a JSON Schema as a readable field list."""

from __future__ import annotations

import json
from typing import Any

from envreg.console.html import e


def _kind(schema: dict[str, Any]) -> str:
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    if "enum" in schema and kind in (None, "string"):
        return "enum"
    return kind if kind in ("string", "integer", "number", "boolean") else "json"


def _field(name: str, schema: dict[str, Any], required: bool) -> str:
    kind = _kind(schema)
    label = f"<code>{e(name)}</code>" + ("" if required else ' <span class="muted">optional</span>')
    about = (
        f' <span class="muted">{e(schema.get("description", ""))}</span>' if schema.get("description") else ""
    )
    attrs = f'name="arg-{e(name)}" data-arg="{e(name)}" data-kind="{"string" if kind == "enum" else kind}"'
    default = schema.get("default")
    if kind == "boolean":
        checked = " checked" if default is True else ""
        control = f'<input type="checkbox" {attrs}{checked}>'
    elif kind == "enum":
        options = "" if required else '<option value=""></option>'
        options += "".join(f'<option value="{e(v)}">{e(v)}</option>' for v in schema["enum"])
        control = f"<select {attrs}>{options}</select>"
    elif kind == "json":
        value = "" if default is None else json.dumps(default)
        control = (
            f'<textarea {attrs} placeholder="JSON ({e(schema.get("type", "any"))})">{e(value)}</textarea>'
        )
    else:
        step = ' step="1"' if kind == "integer" else ' step="any"' if kind == "number" else ""
        input_type = "number" if kind in ("integer", "number") else "text"
        value = f' value="{e(default)}"' if default is not None else ""
        control = f'<input type="{input_type}"{step} {attrs}{value}{" required" if required else ""}>'
    return f"<label>{label}{about}<br>{control}</label>"


def tool_form(tool: dict[str, Any], action: str | None) -> str:
    """The form for one tool (MCP wire form); without `action` (a static page) it cannot be sent."""
    schema = tool.get("inputSchema") or {}
    props: dict[str, Any] = schema.get("properties") or {}
    required = set(schema.get("required") or [])
    fields = "".join(
        _field(name, sub if isinstance(sub, dict) else {}, name in required) for name, sub in props.items()
    )
    fields = fields or '<p class="muted">This tool takes no arguments.</p>'
    if action is None:
        return f'<form class="tool preview">{fields}</form>'
    return (
        f'<form class="tool" method="post" action="{e(action)}">'
        f'<input type="hidden" name="tool" value="{e(tool["name"])}">{fields}'
        "<details><summary>or send JSON arguments as typed</summary>"
        '<label><input type="radio" name="mode" value="form" checked> from the fields</label>'
        '<label><input type="radio" name="mode" value="json"> this JSON</label>'
        '<textarea name="arguments">{}</textarea></details>'
        f'<button type="submit">Call {e(tool["name"])}</button></form>'
    )


def schema_fields(schema: dict[str, Any] | None) -> str:
    """The properties of an object schema as a table: name, type, required, description."""
    if not schema:
        return '<p class="muted">none</p>'
    props: dict[str, Any] = schema.get("properties") or {}
    if not props:
        return f'<p class="muted">type {e(schema.get("type", "any"))}, no named fields</p>'
    required = set(schema.get("required") or [])
    rows = []
    for name, sub in props.items():
        sub = sub if isinstance(sub, dict) else {}
        kind = sub.get("type", "enum" if "enum" in sub else "any")
        if "enum" in sub:
            kind = f"{kind}: {' | '.join(map(str, sub['enum']))}"
        rows.append(
            f"<tr><td><code>{e(name)}</code></td><td>{e(kind)}</td><td>{'yes' if name in required else ''}</td>"
            f"<td>{e(sub.get('description', ''))}</td></tr>"
        )
    return (
        "<table><thead><tr><th>field</th><th>type</th><th>required</th><th>description</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table>"
    )
