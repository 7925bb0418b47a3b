"""A stdio MCP server with the benchmark counter tool: the per-conversation subprocess baseline.

EnvFactory's trainer integration isolates conversations by spawning a fresh stdio MCP server for
each one. `bench/bench_runtime.py` spawns this script with `mcp.Client(StdioServerParameters(...))`
and times spawn -> first tool result. The state lives in the process, so every spawn starts at 0.
"""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer

server = MCPServer("counter")
state = {"value": 0}


@server.tool()
def increment(by: int = 1) -> int:
    """Add to the counter and return its new value."""
    state["value"] += by
    return state["value"]


if __name__ == "__main__":
    server.run("stdio")
