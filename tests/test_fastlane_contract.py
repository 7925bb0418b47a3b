"""What the fast path (`envreg.http.fastpath`) takes from uvicorn's private HTTP protocol, checked against the uvicorn installed.

`envreg.http.fastpath.FastProtocol` subclasses `uvicorn.protocols.http.httptools_impl.HttpToolsProtocol`,
which uvicorn does not promise to keep. These tests fail loudly, naming what moved, when an upgrade changes
the surface it uses; outside `UVICORN_VERIFIED` no front uses it (it warns and serves through ASGI).
"""

from __future__ import annotations

import asyncio
import inspect
import logging

import pytest
import uvicorn
from uvicorn.protocols.http import httptools_impl

from envreg.http import fastpath
from envreg.http.fastpath import UVICORN_VERIFIED, fast_path_supported, verified
from envreg.runtime.fastlane import Lane

OVERRIDDEN = (
    "connection_made",
    "data_received",
    "connection_lost",
    "shutdown",
    "pause_writing",
    "resume_writing",
)
CALLED = ("_unset_keepalive_if_required", "timeout_keep_alive_handler")
"""Methods of uvicorn's protocol the lane overrides (and calls through `super()`), and those it calls."""
pytestmark = pytest.mark.anyio
SET_BY_CONNECTION_MADE = ("transport", "server", "server_state", "timeout_keep_alive", "loop")
SET_BY_INIT = ("timeout_keep_alive_task",)


def test_the_installed_uvicorn_is_one_the_lane_was_verified_with() -> None:
    (low, high) = UVICORN_VERIFIED
    assert fast_path_supported(), (
        f"uvicorn {uvicorn.__version__} is outside UVICORN_VERIFIED {low}..{high}: run this file and "
        "tests/test_fastlane.py against it, then widen UVICORN_VERIFIED in envreg/http/fastpath.py"
    )


_LOW, _HIGH = UVICORN_VERIFIED


@pytest.mark.parametrize(
    ("version", "supported"),
    [
        (f"{_LOW[0]}.{_LOW[1]}.0", True),
        (f"{_HIGH[0]}.{_HIGH[1]}.0", True),
        (f"{_HIGH[0]}.{_HIGH[1]}.7", True),
        (f"{_LOW[0]}.{_LOW[1] - 1}.9", False),
        (f"{_HIGH[0]}.{_HIGH[1] + 1}.0", False),
        (f"{_HIGH[0] + 1}.0.0", False),
        ("garbage", False),
        ("0", False),
    ],
)
def test_versions_outside_the_verified_range_are_refused(version: str, supported: bool) -> None:
    assert fast_path_supported(version) is supported


def test_the_protocol_methods_the_lane_overrides_and_calls_exist_with_their_signatures() -> None:
    base = httptools_impl.HttpToolsProtocol
    for name in OVERRIDDEN + CALLED:
        method = getattr(base, name, None)
        assert callable(method), f"uvicorn {uvicorn.__version__}: HttpToolsProtocol.{name} is gone"
    for name in OVERRIDDEN:
        ours = inspect.signature(getattr(fastpath.FastProtocol, name)).parameters
        theirs = inspect.signature(getattr(base, name)).parameters
        assert list(ours) == list(theirs), f"HttpToolsProtocol.{name}{tuple(theirs)} changed its parameters"
    assert httptools_impl.STATUS_LINE[200] == b"HTTP/1.1 200 OK\r\n"
    assert httptools_impl.STATUS_LINE[404].startswith(b"HTTP/1.1 404 ")


async def test_a_connection_made_sets_the_attributes_the_fast_path_reads() -> None:
    """A real protocol instance as uvicorn builds one for a connection, given a loopback socket's transport."""
    config = uvicorn.Config(app=lambda *_: None, http=Lane(lambda _: None).protocol(), lifespan="off")
    config.load()
    server_state = uvicorn.server.ServerState()
    loop = asyncio.get_running_loop()
    served: list = []
    server = await loop.create_server(
        lambda: served.append(config.http_protocol_class(config, server_state, app_state={})) or served[-1],
        "127.0.0.1",
        0,
    )
    port = server.sockets[0].getsockname()[1]
    _, writer = await asyncio.open_connection("127.0.0.1", port)
    for _ in range(100):
        if served and getattr(served[0], "transport", None) is not None:
            break
        await asyncio.sleep(0.01)
    protocol = served[0]
    missing = [n for n in SET_BY_CONNECTION_MADE + SET_BY_INIT if not hasattr(protocol, n)]
    assert not missing, f"uvicorn {uvicorn.__version__}: the protocol no longer sets {missing}"
    headers = (
        protocol.server_state.default_headers
    )  # uvicorn's date and server headers, refreshed each second
    assert all(isinstance(k, bytes) and isinstance(v, bytes) for k, v in headers), headers
    assert protocol.path.hosts == (
        f"127.0.0.1:{port}".encode(),
        f"localhost:{port}".encode(),
        f"[::1]:{port}".encode(),
    )
    writer.close()
    server.close()
    await server.wait_closed()


def test_an_unverified_uvicorn_gets_no_lane_and_a_warning(monkeypatch, caplog) -> None:
    monkeypatch.setattr(uvicorn, "__version__", "9.9.0")
    with caplog.at_level(logging.WARNING, logger="envreg.http"):
        assert verified("gateway") is False
    assert "uvicorn 9.9.0: the gateway's fast path" in caplog.text and "through ASGI" in caplog.text
    monkeypatch.undo()
    assert verified("gateway") is True
