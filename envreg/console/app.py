"""The console's ASGI app, mounted by the daemon at ``/ui`` (same port, same token as the REST API).

A browser signs in once, on ``/ui/login`` or by opening any page with ``?token=<daemon token>``; the
console then sets an HttpOnly, SameSite=Strict cookie (an HMAC of the token, never the token) and reads
it from then on. ``Authorization: Bearer <token>`` works too. Anything else is a 401 with the sign-in form.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode

import anyio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from envreg.console import catalog as catalog_pages
from envreg.console import episodes, sandboxes, validation
from envreg.console.catalog import Catalog
from envreg.console.data import DataFile, DataFiles
from envreg.console.html import STATIC_FILES, Site, e, link, static_file, table, template
from envreg.console.scoring import EpisodeScores
from envreg.errors import BadRequest, EnvregError, LimitReached, NotFound
from envreg.host_paths import public_text
from envreg.http.auth import bearer_matches

COOKIE = "envreg_console"
MEDIA = {".css": "text/css; charset=utf-8", ".js": "text/javascript; charset=utf-8"}
HEADERS = {
    "Cache-Control": "no-store",
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}


def cookie_value(token: str) -> str:
    return hmac.new(token.encode(), b"envreg console session", hashlib.sha256).hexdigest()


@dataclass
class Console:
    """What the pages read: the runtime and its limits, the catalog, the data files."""

    runtime: Any
    token: str
    catalog: Catalog
    data: DataFiles
    tiers: tuple[str, ...] = ("instance", "container")
    max_sandboxes: int = 1024
    default_ttl: float | None = None
    logs: dict[str, sandboxes.SandboxLog] = field(default_factory=dict)
    scores: EpisodeScores | None = None

    def log(self, sandbox_id: str) -> sandboxes.SandboxLog:
        if sandbox_id not in self.logs:
            self.logs[sandbox_id] = sandboxes.SandboxLog()
        return self.logs[sandbox_id]


SITE = Site()


def _html(text: str, status: int = 200, headers: dict[str, str] | None = None) -> HTMLResponse:
    return HTMLResponse(text, status_code=status, headers={**HEADERS, **(headers or {})})


def _error_page(status: int, message: str, hint: str | None = None) -> HTMLResponse:
    """An error page; like every error body, it names no path of the host (`public_text`)."""
    message, hint = public_text(message), public_text(hint) if hint else None
    body = f'<div class="error">{e(message)}</div>' + (f"<p>{e(hint)}</p>" if hint else "")
    return _html(SITE.page(f"Error {status}", body), status)


def _login_page(message: str = "", status: int = 200) -> HTMLResponse:
    note = f'<div class="error">{e(message)}</div>' if message else ""
    body = template("login.html").substitute(login=e(SITE.url("login")), message=note)
    return _html(SITE.page("Sign in", body), status, {"WWW-Authenticate": 'Bearer realm="envreg console"'})


def _float(text: str | None) -> float | None:
    try:
        return float(text) if text not in (None, "") else None
    except ValueError:
        return None


def create_console(console: Console) -> Starlette:
    expected = cookie_value(console.token)

    def signed_in(request: Request) -> bool:
        given = request.cookies.get(COOKIE, "")
        return hmac.compare_digest(given.encode(), expected.encode()) or bearer_matches(
            request.scope, console.token
        )

    def set_cookie(response: Response) -> Response:
        response.set_cookie(COOKIE, expected, httponly=True, samesite="strict", path="/ui")
        return response

    async def form(request: Request) -> dict[str, str]:
        return dict(parse_qsl((await request.body()).decode("utf-8", "replace"), keep_blank_values=True))

    async def login(request: Request) -> Response:
        if request.method == "GET":
            return _login_page()
        given = (await form(request)).get("token", "")
        if not hmac.compare_digest(given.encode(), console.token.encode()):
            return _login_page("That is not this daemon's token.", 401)
        return set_cookie(RedirectResponse(SITE.url(), 303))

    async def static(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in STATIC_FILES:
            return Response("not found", 404)
        return Response(
            static_file(name), media_type=MEDIA[Path(name).suffix], headers={"Cache-Control": "no-cache"}
        )

    async def home(request: Request) -> Response:
        files = console.data.scan()
        live = [sb for sb in console.runtime.sandboxes.values() if sb.ended is None]
        body = (
            "<ul>"
            f"<li>{link(SITE.url('catalog'), 'Catalog')}: {len(console.catalog.manifests)} environments</li>"
            f"<li>{link(SITE.url('sandboxes'), 'Sandboxes')}: {len(live)} live</li>"
            f"<li>{link(SITE.url('data'), 'Data')}: {len(files)} files (trajectories, rollouts, validation reports)</li>"
            "</ul>"
        )
        return _html(SITE.page("envreg console", body))

    # catalog ------------------------------------------------------------------------------------
    async def catalog(request: Request) -> Response:
        return _html(catalog_pages.catalog_page(SITE, console.catalog))

    def manifest(name: str) -> Any:
        found = console.catalog.get(name)
        if found is None:
            raise NotFound(f"no environment {name[:64]!r} in the catalog", f"see {SITE.url('catalog')}")
        return found

    async def env(request: Request) -> Response:
        m = manifest(request.path_params["name"])
        tiers = "".join(f"<option>{e(t)}</option>" for t in console.tiers)
        play = (
            f'<form method="post" action="{e(SITE.url("env", m.name, "sandbox"))}" class="filters">'
            f"<label>tier <select name=isolation>{tiers}</select></label>"
            "<button type=submit>Start a sandbox and play it</button></form>"
        )
        return _html(catalog_pages.env_page(SITE, console.catalog, m, play))

    async def tool(request: Request) -> Response:
        page = catalog_pages.tool_page(
            SITE, manifest(request.path_params["name"]), request.path_params["tool"]
        )
        if page is None:
            raise NotFound(
                f"environment {request.path_params['name']} has no tool {request.path_params['tool'][:64]!r}"
            )
        return _html(page)

    async def search(request: Request) -> Response:
        return _html(catalog_pages.search_page(SITE, console.catalog, request.query_params.get("q", "")))

    async def graph(request: Request) -> Response:
        console.catalog.graph_file = console.catalog.graph_file or console.data.graph_file()
        return _html(catalog_pages.graph_page(SITE, console.catalog, request.path_params["domain"]))

    # sandboxes ----------------------------------------------------------------------------------
    def sandbox(sandbox_id: str) -> Any:
        sb = console.runtime.get(sandbox_id)
        if sb is None or sb.ended is not None:
            reason = console.runtime.ended_reason(sandbox_id) or (sb.ended if sb else None)
            raise NotFound(
                f"no live sandbox {sandbox_id[:64]!r}" + (f": it ended ({reason})" if reason else "")
            )
        return sb

    async def start(request: Request) -> Response:
        m = manifest(request.path_params["name"])
        isolation = (await form(request)).get("isolation", "")
        if isolation not in console.tiers:
            raise BadRequest(
                f"tier {isolation[:20]!r} is not enabled on this daemon (enabled: {', '.join(console.tiers)})",
                f"start it with `envreg serve --tiers {','.join(console.tiers)},{isolation[:20]}`",
            )
        if len(console.runtime.sandboxes) >= console.max_sandboxes:
            raise LimitReached(
                f"this daemon holds its maximum of {console.max_sandboxes} sandboxes", "stop some first"
            )
        sb = await console.runtime.sandbox(m.name, isolation=isolation, ttl=console.default_ttl)
        console.log(sb.id)
        return RedirectResponse(SITE.url("sandboxes", sb.id), 303)

    async def sandbox_list(request: Request) -> Response:
        rows = []
        for sb in [s for s in console.runtime.sandboxes.values() if s.ended is None]:
            size: int | None = None
            try:
                with anyio.fail_after(5):
                    size = sandboxes.state_size(await sb.state())
            except Exception:  # a sandbox that cannot answer now still gets its row
                size = None
            rows.append((sb, console.log(sb.id), size))
        return _html(sandboxes.list_page(SITE, rows))

    async def sandbox_view(request: Request) -> Response:
        sb = sandbox(request.path_params["id"])
        tools, state = await sb.list_tools(), await sb.state()
        notice = e(request.query_params.get("notice", "")[:200])
        return _html(sandboxes.sandbox_page(SITE, sb, console.log(sb.id), tools, state, notice))

    async def call(request: Request) -> Response:
        sb = sandbox(request.path_params["id"])
        fields = await form(request)
        name = fields.get("tool", "")
        try:
            arguments = json.loads(fields.get("arguments") or "{}")
        except ValueError as exc:
            return _error_page(
                400, f"the arguments are not valid JSON: {exc}", "fix the JSON and send it again"
            )
        if not isinstance(arguments, dict):
            return _error_page(400, "the arguments must be a JSON object", 'e.g. {"title": "x"}')
        before = await sb.state()
        result = (await sb.call_tool(name, arguments)).to_mcp()
        after = await sb.state()
        console.log(sb.id).calls.append(sandboxes.CallEntry(name, arguments, result, before, after))
        return RedirectResponse(SITE.url("sandboxes", sb.id), 303)

    async def snapshot(request: Request) -> Response:
        sb = sandbox(request.path_params["id"])
        snap = await sb.snapshot()
        console.log(sb.id).snapshots.append(snap.id)
        return RedirectResponse(SITE.url("sandboxes", sb.id, notice=f"snapshot {snap.id}"), 303)

    async def fork(request: Request) -> Response:
        sb = sandbox(request.path_params["id"])
        if len(console.runtime.sandboxes) >= console.max_sandboxes:
            raise LimitReached(
                f"this daemon holds its maximum of {console.max_sandboxes} sandboxes", "stop some first"
            )
        snap = await sb.snapshot()
        console.log(sb.id).snapshots.append(snap.id)
        (forked,) = await console.runtime.fork(snap, 1, isolation=sb.isolation, ttl=console.default_ttl)
        console.log(forked.id).snapshots.append(snap.id)
        return RedirectResponse(
            SITE.url("sandboxes", forked.id, notice=f"forked from {sb.id} at {snap.id}"), 303
        )

    async def stop(request: Request) -> Response:
        sb = sandbox(request.path_params["id"])
        await sb.close("deleted")
        console.logs.pop(sb.id, None)
        return RedirectResponse(SITE.url("sandboxes"), 303)

    # data ---------------------------------------------------------------------------------------
    def data_file(fid: str) -> DataFile:
        found = console.data.get(fid)
        if found is None:
            raise NotFound(
                f"no data file {fid[:64]!r}",
                "the console shows only files under `envreg serve --ui-data` folders",
            )
        return found

    async def data_list(request: Request) -> Response:
        return _html(data_index(SITE, console.data))

    async def data_view(request: Request) -> Response:
        data = data_file(request.path_params["fid"])
        if data.kind == "validation":
            return _html(validation.validation_page(SITE, data, json.loads(data.path.read_text())))
        if data.kind == "graph":
            return RedirectResponse(SITE.url("catalog"), 303)
        index = await anyio.to_thread.run_sync(console.data.index, data)
        q = request.query_params
        page = int(q["page"]) if q.get("page", "").isdigit() else 1
        return _html(
            episodes.list_page(
                SITE,
                data,
                index,
                scores().rewards(data.id),
                env=q.get("env", ""),
                failure=q.get("failure", ""),
                min_reward=_float(q.get("min")),
                max_reward=_float(q.get("max")),
                page=page,
            )
        )

    def scores() -> EpisodeScores:
        if console.scores is None:
            console.scores = EpisodeScores(console.runtime, console.catalog.folders())
        return console.scores

    async def episode(request: Request) -> Response:
        data = data_file(request.path_params["fid"])
        index = await anyio.to_thread.run_sync(console.data.index, data)
        n = request.path_params["n"]
        if data.kind != "episodes" or not n.isdigit() or int(n) >= len(index):
            raise NotFound(f"{data.label} has no episode {n[:20]!r}", f"it holds {len(index)}")
        row = index.row(int(n))
        breakdown, error = await scores().get(data.id, int(n), row)
        return _html(episodes.episode_page(SITE, data, index.summaries[int(n)], row, breakdown, error))

    routes = [
        Route("/ui/login", login, methods=["GET", "POST"]),
        Route("/ui/static/{name}", static),
        Route("/ui", home),
        Route("/ui/", home),
        Route("/ui/catalog", catalog),
        Route("/ui/search", search),
        Route("/ui/graph/{domain}", graph),
        Route("/ui/env/{name}", env),
        Route("/ui/env/{name}/sandbox", start, methods=["POST"]),
        Route("/ui/env/{name}/tool/{tool}", tool),
        Route("/ui/sandboxes", sandbox_list),
        Route("/ui/sandboxes/{id}", sandbox_view),
        Route("/ui/sandboxes/{id}/call", call, methods=["POST"]),
        Route("/ui/sandboxes/{id}/snapshot", snapshot, methods=["POST"]),
        Route("/ui/sandboxes/{id}/fork", fork, methods=["POST"]),
        Route("/ui/sandboxes/{id}/stop", stop, methods=["POST"]),
        Route("/ui/data", data_list),
        Route("/ui/data/{fid}", data_view),
        Route("/ui/data/{fid}/{n}", episode),
    ]

    async def envreg_error(_: Request, exc: Exception) -> Response:
        assert isinstance(exc, EnvregError)
        return _error_page(exc.status, exc.message, exc.hint)

    inner = Starlette(routes=routes, exception_handlers={EnvregError: envreg_error})

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        request = Request(scope, receive)
        path = scope["path"]
        public = path == "/ui/login" or path.startswith("/ui/static/")
        token = request.query_params.get("token")
        if token is not None and not public:
            if not hmac.compare_digest(token.encode(), console.token.encode()):
                await _login_page("That is not this daemon's token.", 401)(scope, receive, send)
                return
            rest = urlencode([(k, v) for k, v in request.query_params.multi_items() if k != "token"])
            await set_cookie(RedirectResponse(path + (f"?{rest}" if rest else ""), 303))(scope, receive, send)
            return
        if not public and not signed_in(request):
            await _login_page("Sign in with the daemon's token to use the console.", 401)(
                scope, receive, send
            )
            return
        await inner(scope, receive, send)

    return app  # type: ignore[return-value]


def file_url(site: Site, data: DataFile) -> str:
    """A file's page; a tool graph is drawn on the domains' graph pages, reached from the catalog."""
    return site.url("catalog") if data.kind == "graph" else site.url("data", data.id)


def data_index(site: Site, data: DataFiles) -> str:
    files = data.scan()
    rows = [[link(file_url(site, f), f.label), e(f.kind), f"{f.path.stat().st_size:,} B"] for f in files]
    where = ", ".join(f"<code>{e(p)}</code>" for p in (*data.folders, *data.files)) or "none"
    note = (
        "" if site.static else " (start the daemon with <code>envreg serve --ui-data DIR</code>, repeatable)"
    )
    return site.page(
        "Data",
        f"<p>Files read from: {where}{note}.</p>"
        + (table(["file", "kind", "size"], rows, numeric=(2,)) if rows else '<p class="muted">no files</p>'),
    )
