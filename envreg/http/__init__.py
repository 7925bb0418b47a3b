"""envreg's one HTTP layer: what every front (the environment server's planes, the gateway and its fast
lane, the daemon, the reward server, the Ray node proxy) and every client shares.

- `envreg.http.asgi`: raw-ASGI answers, capped request bodies (`BodyLimit`), ``Keep-Alive``;
- `envreg.http.auth`: bearer tokens, compared in constant time;
- `envreg.http.jsonrpc`: which requests are MCP ones, and JSON-RPC error bodies;
- `envreg.http.errors`: every front's error body (JSON-RPC for MCP clients, ``{"error"}`` otherwise);
- `envreg.http.loopback`: the loopback names, declared once;
- `envreg.http.access`: the Host / Origin rule (DNS rebinding) and CORS;
- `envreg.http.routing`: a small method + path router for raw-ASGI fronts;
- `envreg.http.rest`: what the FastAPI fronts (daemon, reward server) share;
- `envreg.http.client`: the one way envreg opens an HTTP client (`async_client`, `sync_client`).
- `envreg.http.serving`: uvicorn servers that sleep while idle and leave signals to their program
  (`QuietServer`), and `SignalStop` for a process that is its servers.

Nothing is imported here: an environment server imports only the parts it serves with.
"""
