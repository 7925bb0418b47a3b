"""Who may talk to a gateway port: Host and Origin checks (DNS rebinding) and CORS for browser clients.

One ASGI middleware, used by the runtime's gateway and by the daemon (API and gateway on one port).

- **Host**: ``127.0.0.1``, ``localhost`` or ``[::1]`` with the port the request arrived on, the IP
  address it arrived at, or one of `allowed_hosts` (``name:port`` exactly, or ``name:*`` for any
  port, the rule of the `mcp` SDK). Anything else is a 421, like the SDK's servers answer: a page on
  ``evil.example`` that rebinds its name to 127.0.0.1 still sends ``Host: evil.example``.
- **Origin** (sent by browsers): absent, one of `cors_origins`, or an ``http(s)://`` origin whose
  host passes the Host rule; anything else (``null`` included) is a 403.
- **CORS**: for `cors_origins` (none by default; ``*`` for any), preflights are answered and
  responses carry the headers a browser MCP client needs to read them.
"""

from __future__ import annotations

from collections.abc import Iterable

from starlette.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send

from envreg.http.asgi import send_json
from envreg.http.loopback import LOOPBACK_HOSTS

CORS_METHODS = ("GET", "POST", "DELETE", "OPTIONS")
EXPOSED_HEADERS = ("Mcp-Session-Id", "Mcp-Protocol-Version", "WWW-Authenticate")
SHORT = 64
_DEFAULT_PORTS = {"http": 80, "https": 443}


def shorten(text: str, limit: int = SHORT) -> str:
    """`text` cut to `limit` characters (an id or path from a request, before it is echoed back)."""
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text)} characters)"


def _split(authority: str) -> tuple[str, int | None]:
    """``name:port`` -> (name, port); ``[v6]:port`` keeps its brackets; no port -> (name, None)."""
    name, sep, port = authority.rpartition(":")
    if not sep or (name.startswith("[") and not name.endswith("]")) or "]" in port:
        return authority, None
    if not port.isdigit() or len(port) > 5:
        return authority, -1  # a port that is not one never matches
    return name, int(port)


def _ip_literal(address: str) -> str:
    return f"[{address}]" if ":" in address else address


class AccessGuard:
    """ASGI middleware: 421 for a Host that is not this server's, 403 for a foreign Origin, then CORS."""

    def __init__(
        self, app: ASGIApp, allowed_hosts: Iterable[str] = (), cors_origins: Iterable[str] = ()
    ) -> None:
        self.allowed_hosts = frozenset(h.lower() for h in allowed_hosts)
        self.any_port = frozenset(h[:-2] for h in self.allowed_hosts if h.endswith(":*"))
        self.cors_origins = tuple(o.rstrip("/") for o in cors_origins)
        self.any_origin = "*" in self.cors_origins
        self.app: ASGIApp = app
        if self.cors_origins:
            self.app = CORSMiddleware(
                app,
                allow_origins=self.cors_origins,
                allow_methods=CORS_METHODS,
                allow_headers=["*"],  # mirrors the requested ones: Authorization, Mcp-*, Last-Event-ID
                expose_headers=EXPOSED_HEADERS,
                allow_private_network=True,
            )

    def allows_host(self, host: str, scope: Scope) -> bool:
        if host in self.allowed_hosts:
            return True
        name, port = _split(host)
        if name in self.any_port and port is not None:
            return True
        server = scope.get("server")
        if not server:
            return False
        local_address, local_port = server
        if (port or 80) != local_port:
            return False
        return name in LOOPBACK_HOSTS or name == _ip_literal(local_address or "")

    def allows_origin(self, origin: str, scope: Scope) -> bool:
        if self.any_origin or origin.rstrip("/") in self.cors_origins:
            return True
        scheme, sep, authority = origin.lower().partition("://")
        if not sep or scheme not in _DEFAULT_PORTS or not authority or "/" in authority:
            return False
        if self.allows_host(authority, scope):
            return True
        name, port = _split(authority)
        return port is None and self.allows_host(f"{name}:{_DEFAULT_PORTS[scheme]}", scope)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        host = origin = None
        for key, value in scope["headers"]:
            if key == b"host":
                host = value.decode("latin-1").lower()
            elif key == b"origin":
                origin = value.decode("latin-1")
        if host is None or not self.allows_host(host, scope):
            shown = shorten(host) if host else "none"
            await send_json(
                send,
                421,
                {
                    "error": f"Host {shown!r} is not this server's (DNS-rebinding protection): use "
                    "http://127.0.0.1:<port>, or allow the name with `envreg serve --allow-host`"
                },
            )
            return
        if origin is not None and not self.allows_origin(origin, scope):
            await send_json(
                send,
                403,
                {
                    "error": f"Origin {shorten(origin)!r} may not call this server: allow a browser "
                    "client's origin with `envreg serve --cors-origin` (Runtime(cors_origins=...))"
                },
            )
            return
        await self.app(scope, receive, send)
