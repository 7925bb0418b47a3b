"""HTML building blocks: escaping, tables, JSON blocks, and the page layout (``templates/layout.html``)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from html import escape
from importlib.resources import files
from string import Template
from typing import Any
from urllib.parse import quote, urlencode

PACKAGE = files("envreg.console")


def e(value: Any) -> str:
    """`value` as escaped HTML text."""
    return escape(str(value), quote=True)


@cache
def template(name: str) -> Template:
    return Template((PACKAGE / "templates" / name).read_text())


def static_file(name: str) -> bytes:
    return (PACKAGE / "static" / name).read_bytes()


STATIC_FILES = ("console.css", "console.js")


def json_block(value: Any, limit: int = 200_000) -> str:
    text = json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)
    if len(text) > limit:
        text = text[:limit] + f"\n… ({len(text) - limit} more characters)"
    return f"<pre>{e(text)}</pre>"


def table(headers: list[str], rows: list[list[str]], numeric: tuple[int, ...] = (), attrs: str = "") -> str:
    """A table of already-escaped cells; columns in `numeric` are right-aligned; `attrs` go on <table>."""
    head = "".join(f"<th>{h}</th>" for h in headers)
    body = "".join(
        "<tr>"
        + "".join(f'<td class="num">{c}</td>' if i in numeric else f"<td>{c}</td>" for i, c in enumerate(row))
        + "</tr>"
        for row in rows
    )
    return f"<table{' ' + attrs if attrs else ''}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def link(href: str, text: Any) -> str:
    return f'<a href="{e(href)}">{e(text)}</a>'


def fmt(x: float | None, digits: int = 3) -> str:
    return "—" if x is None else f"{x:.{digits}f}"


@dataclass(frozen=True)
class Site:
    """Where pages link to: the daemon's ``/ui/...`` routes, or the files of a static export.

    A static export holds only GET pages; anything that acts (a form posting to the daemon) is left out.
    """

    static: bool = False
    prefix: str = "/ui"

    def url(self, *parts: str, **query: Any) -> str:
        query = {k: v for k, v in query.items() if v not in (None, "")}
        if self.static:
            name = "-".join(_file_part(p) for p in parts) or "index"
            suffix = (
                ("-" + "-".join(f"{k}{_file_part(str(v))}" for k, v in sorted(query.items())))
                if query
                else ""
            )
            return f"{name}{suffix}.html"
        path = "/".join(quote(p, safe="") for p in parts)
        tail = f"?{urlencode(query)}" if query else ""
        return f"{self.prefix}/{path}{tail}"

    def asset(self, name: str) -> str:
        return f"static/{name}" if self.static else f"{self.prefix}/static/{name}"

    def page(self, title: str, body: str) -> str:
        nav = [("Catalog", self.url("catalog"))]
        if not self.static:
            nav += [("Search", self.url("search")), ("Sandboxes", self.url("sandboxes"))]
        nav.append(("Data", self.url("data")))
        return template("layout.html").substitute(
            title=e(title),
            static=e(self.asset("")),
            home=e(self.url()),
            nav="".join(link(href, text) for text, href in nav),
            body=body,
        )


def _file_part(text: str) -> str:
    """A piece of a file name: letters, digits, ``.``, ``_`` kept; anything else as ``~xx``."""
    return "".join(c if c.isalnum() or c in "._" else f"~{ord(c):02x}" for c in text)
