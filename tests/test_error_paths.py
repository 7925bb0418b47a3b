"""No error body names a path of the host: bad input sent to every front (the daemon's REST API and console,
an environment server's planes, the reward server, a Ray node's proxy) gets an error that says what was wrong
and what to do, with the host's roots named neutrally (`envreg.errors.public_text`): never the checkout, the
working directory, $ENVREG_HOME, the catalog's folder, the temp folder or the Python installation."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from conftest import FIXTURES, ROOT

from envreg.errors import SnapshotCorrupt
from envreg.host_paths import public_text
from envreg.protocol import FOREIGN_MARKER

pytestmark = pytest.mark.anyio
JSON = {"content-type": "application/json"}
HOST = "127.0.0.1:7070"


def host_paths(*extra: Path) -> list[str]:
    """What no error body may hold: the absolute roots of this host (and `extra` folders of the test)."""
    roots = [Path.cwd(), ROOT, Path(os.environ["ENVREG_HOME"]), Path(sys.prefix), *extra]
    return [str(p) for p in roots] + [tempfile.gettempdir() + os.sep]


def assert_no_host_path(body: str, *extra: Path) -> None:
    for path in host_paths(*extra):
        assert path not in body, f"{path} in {body}"


@pytest.fixture
def catalog(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A catalog folder ($ENVREG_IMAGES, absolute) with one good environment and bad ones; the working
    directory a folder of its own, as a daemon started elsewhere has."""
    folder = tmp_path / "catalog"
    (folder / "counter").mkdir(parents=True)
    (folder / "counter" / "env.py").write_text((FIXTURES / "counter" / "env.py").read_text())
    for name, code in {
        "noenv": "x = 1\n",
        "raises": "from pathlib import Path\nPath(__file__).with_name('missing.txt').read_text()\n",
        "foreign": "x = 1\n",
    }.items():
        (folder / name).mkdir()
        (folder / name / "env.py").write_text(code)
    (folder / "foreign" / FOREIGN_MARKER).write_text("{}")
    monkeypatch.setenv("ENVREG_IMAGES", str(folder))
    monkeypatch.setenv("ENVREG_MANIFESTS", str(ROOT / "manifests"))
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    return folder


# ----------------------------------------------------------------------------------------- the function
def test_public_text_names_each_root_neutrally(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("ENVREG_HOME", str(home))
    monkeypatch.setenv("ENVREG_IMAGES", str(tmp_path / "cat"))
    monkeypatch.chdir(tmp_path)
    stdlib = os.path.dirname(os.__file__)
    assert (
        public_text(f"no snapshot 'ab12' in {home}/snapshots")
        == "no snapshot 'ab12' in $ENVREG_HOME/snapshots"
    )
    assert public_text(f"a name under {tmp_path}/cat/ (known: none)") == "a name under images/ (known: none)"
    assert public_text(f"{tmp_path}/x.json: bad") == "./x.json: bad", "the working directory is ."
    assert public_text(f"{tempfile.gettempdir()}/other") == "$TMPDIR/other"
    assert (
        public_text(f'File "{stdlib}/json/decoder.py", line 1') == 'File "<stdlib>/json/decoder.py", line 1'
    )
    assert public_text(f"{sys.prefix}/bin/python") == "<python>/bin/python"
    # whole components only; URL paths, relative paths and text without a path as they are
    assert "<python>" not in public_text(f"{sys.prefix}x/y"), "a root matches whole components only"
    for kept in (
        "/var" + tempfile.gettempdir(),
        "POST /v1/sandboxes and /mcp",
        "images/x",
        "ok",
    ):
        assert public_text(kept) == kept


def test_error_bodies_of_envreg_errors_name_no_host_path(envreg_home: Path) -> None:
    exc = SnapshotCorrupt(
        f"snapshot file {envreg_home}/snapshots/ab.json is unreadable", f"delete {envreg_home}/x"
    )
    body = json.dumps(exc.to_json())
    assert_no_host_path(body)
    assert (
        "snapshot file $ENVREG_HOME/snapshots/ab.json is unreadable" in body
        and "delete $ENVREG_HOME/x" in body
    )
    assert str(envreg_home) in str(exc), "the CLI prints the message as it is: its user is on the host"


# ------------------------------------------------------------------------------------------- the daemon
@pytest.fixture
async def daemon(catalog: Path) -> AsyncIterator[httpx2.AsyncClient]:
    from envreg.daemon.app import DaemonSettings, create_app
    from envreg.runtime import Runtime

    async with Runtime(gateway=False) as rt, httpx2.AsyncClient() as upstream:
        rt.gateway_url = f"http://{HOST}"
        settings = DaemonSettings(token="t", tiers=("local",), allowed_hosts=(HOST,))
        app = create_app(rt, settings, upstream)
        transport = httpx2.ASGITransport(app=app, raise_app_exceptions=False)
        headers = {"authorization": "Bearer t"}
        async with httpx2.AsyncClient(transport=transport, base_url=f"http://{HOST}", headers=headers) as c:
            yield c


async def refused(
    client: httpx2.AsyncClient, method: str, path: str, status: int, *extra: Path, **kw: Any
) -> str:
    response = await client.request(method, path, **kw)
    assert response.status_code == status, response.text
    assert_no_host_path(response.text, *extra)
    return response.json()["error"]


async def test_daemon_unknown_and_bad_environments(daemon: httpx2.AsyncClient, catalog: Path) -> None:
    def create(env: str) -> dict[str, Any]:
        return {"json": {"env": env, "isolation": "local"}}

    error = await refused(daemon, "POST", "/v1/sandboxes", 404, catalog, **create("nosuch"))
    assert "no environment 'nosuch'" in error and "a name under images/" in error and "counter" in error
    error = await refused(daemon, "POST", "/v1/sandboxes", 404, catalog, **create("noenv"))
    assert error == "images/noenv/env.py defines no `env = Environment(...)`"
    error = await refused(daemon, "POST", "/v1/sandboxes", 403, catalog, **create("foreign"))
    assert f"(images/foreign/{FOREIGN_MARKER})" in error and "container sandbox" in error
    error = await refused(daemon, "POST", "/v1/sandboxes", 500, catalog, **create("raises"))
    assert error.startswith("internal error: FileNotFoundError") and "images/raises/missing.txt" in error
    for name in ("../x", "/etc/passwd", "calendar/../bank"):
        await refused(
            daemon, "POST", "/v1/sandboxes", 400 if name[0] in "./" else 404, catalog, **create(name)
        )


async def test_daemon_a_catalog_folder_that_does_not_exist(
    daemon: httpx2.AsyncClient, catalog: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ENVREG_IMAGES", str(catalog / "gone"))
    body = {"env": "counter", "isolation": "local"}
    error = await refused(daemon, "POST", "/v1/sandboxes", 404, catalog, json=body)
    assert "no environment 'counter'" in error and "images/ (known: none)" in error


async def test_daemon_unknown_malformed_and_damaged_snapshots(
    daemon: httpx2.AsyncClient, catalog: Path, envreg_home: Path
) -> None:
    created = await daemon.post("/v1/sandboxes", json={"env": "counter", "isolation": "local"})
    assert created.status_code == 201, created.text
    sb = created.json()["id"]
    for ref in ("sha256:" + "1" * 64, "1" * 64, "1111"):
        error = await refused(daemon, "POST", f"/v1/sandboxes/{sb}/restore", 404, json={"snapshot": ref})
        assert error == f"no snapshot {ref!r} in $ENVREG_HOME/snapshots"
    error = await refused(daemon, "POST", "/v1/fork", 404, json={"snapshot": "1" * 64, "n": 1})
    assert "$ENVREG_HOME/snapshots" in error
    for ref in ("../x", "/etc/passwd", "nosuch"):
        await refused(daemon, "POST", f"/v1/sandboxes/{sb}/restore", 400, json={"snapshot": ref})
    snap = (await daemon.post(f"/v1/sandboxes/{sb}/snapshot")).json()["id"]
    stored = envreg_home / "snapshots" / f"{snap.removeprefix('sha256:')}.json"
    stored.write_text(stored.read_text().replace('"value":0', '"value":7'))
    for ref in (snap, snap[:12]):
        error = await refused(daemon, "POST", f"/v1/sandboxes/{sb}/restore", 422, json={"snapshot": ref})
        assert (
            f"snapshot file $ENVREG_HOME/snapshots/{stored.name} does not hold what its address names"
            in error
        )
        assert "take the snapshot again" in error
    stored.write_text("{not json")
    error = await refused(daemon, "POST", "/v1/fork", 422, json={"snapshot": snap, "n": 1})
    assert f"snapshot file $ENVREG_HOME/snapshots/{stored.name} is unreadable" in error


async def test_daemon_bad_bodies(daemon: httpx2.AsyncClient, catalog: Path) -> None:
    for body in (b"{bad json", b'{"a": NaN}', b"[1, 2]", b'{"env": 3}'):
        error = await refused(daemon, "POST", "/v1/sandboxes", 400, catalog, content=body, headers=JSON)
        assert error.startswith("invalid request")
    error = await refused(daemon, "GET", "/v1/sandboxes/sb_0000000000000000/state", 404)
    assert "no sandbox 'sb_0000000000000000'" in error


async def test_console_error_pages_name_no_host_path(
    daemon: httpx2.AsyncClient, catalog: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the manifests list calendar, no folder has it
    monkeypatch.setenv("ENVREG_IMAGES", str(catalog / "gone"))
    form = {"content-type": "application/x-www-form-urlencoded"}
    response = await daemon.post("/ui/env/calendar/sandbox", content=b"isolation=local", headers=form)
    assert response.status_code == 404, response.text
    assert_no_host_path(response.text, catalog)
    assert "no environment &#x27;calendar&#x27;" in response.text and "a name under images/" in response.text


# ------------------------------------------------------------------------------ the environment server
@pytest.fixture
def env_planes(catalog: Path) -> tuple[httpx2.AsyncClient, httpx2.AsyncClient]:
    from envreg.env import load_environment
    from envreg.server.app import EnvServer, ServerConfig

    server = EnvServer.build(
        ServerConfig(env="counter", token="t", agent_token="a"), load_environment("counter")
    )
    control, agent = (
        httpx2.AsyncClient(
            transport=httpx2.ASGITransport(app=app, raise_app_exceptions=False),
            base_url="http://127.0.0.1",
            headers={"authorization": f"Bearer {token}"},
        )
        for app, token in ((server.control, "t"), (server.agent, "a"))
    )
    return control, agent


async def test_environment_server_planes_name_no_host_path(
    env_planes: tuple[httpx2.AsyncClient, httpx2.AsyncClient], catalog: Path
) -> None:
    control, agent = env_planes
    async with control, agent:
        for method, path, body, status in [
            ("POST", "/instances", b"{bad", 400),
            ("POST", "/instances", b'{"id": "../x"}', 400),
            ("POST", "/instances", b'{"snapshot": "/etc/passwd"}', 404),
            ("POST", "/instances", b'{"state": {"value": "x"}}', 422),
            ("PUT", "/instances/default/state", b"[1]", 400),
            ("PUT", "/snapshots/" + "0" * 64, b"{}", 422),
            ("POST", "/instances/default/restore", b'{"snapshot": "' + b"0" * 64 + b'"}', 404),
            ("GET", "/instances/nosuch/state", None, 404),
            ("GET", "/etc/passwd", None, 404),
        ]:
            error = await refused(control, method, path, status, catalog, content=body)
            assert error and "Traceback" not in error
        for path in ("/i/nosuch/mcp", "/etc/passwd", "/i/../x/mcp"):
            response = await agent.post(
                path, content=b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}', headers=JSON
            )
            assert response.status_code == 404, response.text
            assert_no_host_path(response.text, catalog)
            assert response.json()["error"]["message"]


def test_mcp_error_bodies_name_no_host_path(envreg_home: Path) -> None:
    """What the agent plane, the gateway and the session layer send (`error_body`), MCP or not."""
    from envreg.http.errors import error_body

    message = f"sandbox sb_1 ended: its server died reading {envreg_home}/snapshots/ab.json"
    for call in ((True, 7), (False, None)):
        body = error_body(message, call).decode()
        assert_no_host_path(body)
        assert "reading $ENVREG_HOME/snapshots/ab.json" in body


async def test_ray_proxy_errors_name_no_host_path(envreg_home: Path) -> None:
    from envreg.runtime.backends.ray_proxy import _fail

    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    for plane in ("agent", "control"):
        await _fail(send, plane, 502, f"container abc did not answer: {envreg_home}/sock: connection refused")
    for message in sent:
        if message["type"] == "http.response.body":
            assert_no_host_path(message["body"].decode())
            assert b"$ENVREG_HOME/sock: connection refused" in message["body"]


# ---------------------------------------------------------------------------------- the reward server
async def test_reward_server_item_errors_name_no_host_path(catalog: Path) -> None:
    from envreg.reward.server import RewardServerConfig, create_app
    from envreg.runtime import Runtime

    def record(env: str) -> dict[str, Any]:
        return {"envs": [env], "calls": [], "initial_states": {env: {}}, "final_states": {env: {}}}

    sources = {"moved": str(catalog / "moved"), "here": str(Path.cwd() / "envs" / "here")}
    names = ["noenv", "raises", "moved", "here", "nosuch", "../x", "/etc/passwd"]
    items = [{"record": record(name), "output": ""} for name in names]
    items += [{"record": "{not json", "output": ""}, {"record": {"envs": ["counter"]}, "output": ""}]
    async with Runtime(gateway=False) as rt:
        app = create_app(RewardServerConfig(token="t", sources=sources), runtime=rt)
        transport = httpx2.ASGITransport(app=app, raise_app_exceptions=False)
        async with (
            app.router.lifespan_context(app),
            httpx2.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client,
        ):
            auth = {"authorization": "Bearer t"}
            response = await client.post("/v1/score", json={"items": items}, headers=auth)
            assert response.status_code == 200, response.text
            assert_no_host_path(response.text, catalog)
            errors = [r["error"] for r in response.json()["results"]]
            assert errors[0] == "EnvironmentNotFound: images/noenv/env.py defines no `env = Environment(...)`"
            assert errors[1].startswith("FileNotFoundError") and "images/raises/missing.txt" in errors[1]
            assert "no environment 'images/moved'" in errors[2] and "a name under images/" in errors[2]
            assert "no environment './envs/here'" in errors[3]
            for error in errors[4:7]:
                assert "is not in this server's catalog" in error and "--env NAME=FOLDER" in error
            assert "not valid JSON" in errors[7] and "initial_states" in errors[8]
            for body in (b"{bad", b'{"items": 3}'):
                response = await client.post("/v1/score", content=body, headers={**auth, **JSON})
                assert response.status_code == 400
                assert_no_host_path(response.text, catalog)
