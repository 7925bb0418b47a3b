"""Ray backend figures: sandboxes acquired per second across 3 Ray nodes vs 1.

Starts a Ray cluster on this machine (`ray.cluster_utils.Cluster`, every address on loopback) with 1 and
then 3 nodes, each hosting up to `--per-node` servers (`envreg_servers`), and times `--n` concurrent
cold acquisitions (no warm pool) on the container tier and on the instance tier, each followed by one
tool call. The driver, the nodes and the containers share this machine's CPUs and its one Docker engine:
the figures show the backend's own overhead and how starts spread, not a cluster's added hardware.
Also timed: one tool call through the runtime (via the node's proxy) and through the gateway.

Needs the Docker engine, the `ray` extra and the image (`envreg build calendar`); run it under the
shared Docker lock. From the repository root:

    .venv/bin/python bench/bench_ray.py [--n 24] [--per-node 32] [--env calendar]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # Ray resolves this node to 127.0.0.1
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import anyio
import httpx2

TOOLS = {"calendar": ("list_calendars", {}), "bank": ("get_balance", {"account_id": "acc_0001"})}
clock = time.perf_counter


def start_cluster(nodes: int, per_node: int) -> Any:
    from ray.cluster_utils import Cluster

    args = {"num_cpus": 1, "object_store_memory": 80 << 20, "resources": {"envreg_servers": per_node}}
    cluster = Cluster(initialize_head=True, head_node_args={**args, "include_dashboard": False})
    for _ in range(nodes - 1):
        cluster.add_node(**args)
    cluster.wait_for_nodes()
    return cluster


async def acquire_rate(rt: Any, env: str, isolation: str, n: int) -> tuple[float, dict[str, int]]:
    """n concurrent acquisitions + first call; returns sandboxes per second and sandboxes per node."""
    tool, arguments = TOOLS[env]
    sandboxes: list[Any] = []

    async def one() -> None:
        sb = await rt.sandbox(env, isolation=isolation)
        assert not (await sb.call_tool(tool, arguments)).is_error
        sandboxes.append(sb)

    started = clock()
    async with anyio.create_task_group() as tg:
        for _ in range(n):
            tg.start_soon(one)
    elapsed = clock() - started
    per_node: dict[str, int] = {}
    for sb in sandboxes:
        label = rt.backend.node_of(sb.server).id[:8] if hasattr(rt.backend, "node_of") else "this host"
        per_node[label] = per_node.get(label, 0) + 1
    async with anyio.create_task_group() as tg:
        for sb in sandboxes:
            tg.start_soon(sb.close)
    return n / elapsed, per_node


async def call_latency(rt: Any, env: str, calls: int) -> tuple[float, float]:
    """p50 ms of one tool call through the runtime's client and through the gateway (on Ray: + node proxy)."""
    tool, arguments = TOOLS[env]
    sb = await rt.sandbox(env, isolation="instance")
    direct, gateway = [], []
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": tool, "arguments": arguments},
    }
    body["params"]["_meta"] = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    headers = {
        "authorization": f"Bearer {sb.token}",
        "accept": "application/json, text/event-stream",
        "mcp-protocol-version": "2026-07-28",
        "mcp-method": "tools/call",
        "mcp-name": tool,
    }
    async with httpx2.AsyncClient() as http:
        for _ in range(calls):
            started = clock()
            await sb.call_tool(tool, arguments)
            direct.append((clock() - started) * 1000)
            started = clock()
            response = await http.post(sb.mcp_url, json=body, headers=headers)
            gateway.append((clock() - started) * 1000)
            assert response.status_code == 200, response.text
    await sb.close()
    return statistics.median(direct), statistics.median(gateway)


async def measure(address: str | None, env: str, n: int, calls: int) -> dict[str, Any]:
    """On the Ray backend at `address`; on the Docker backend (no Ray) when it is None."""
    from envreg.runtime import Runtime

    options = {"backend": "ray", "address": address} if address else {}
    async with Runtime(**options) as rt:
        # warm-up, not timed: agents up, image resolved, each node's network and keeper made
        await rt.resolve(env, "container")
        await acquire_rate(rt, env, "container", len(getattr(rt.backend, "nodes", [None])))
        container, spread = await acquire_rate(rt, env, "container", n)
        instance, spread_i = await acquire_rate(rt, env, "instance", n)
        direct, gateway = await call_latency(rt, env, calls)
    return {
        "container": container,
        "spread": spread,
        "instance": instance,
        "spread_instance": spread_i,
        "direct": direct,
        "gateway": gateway,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=24, help="sandboxes acquired at once per measurement")
    parser.add_argument("--per-node", type=int, default=32, help="servers each node may host")
    parser.add_argument("--env", default="calendar", choices=sorted(TOOLS))
    parser.add_argument("--calls", type=int, default=200, help="tool calls timed for the latency figures")
    args = parser.parse_args()
    results: dict[Any, dict[str, Any]] = {"docker": anyio.run(measure, None, args.env, args.n, args.calls)}
    print(f"Docker backend, no Ray: {results['docker']}", flush=True)
    for nodes in (1, 3):
        cluster = start_cluster(nodes, args.per_node)
        try:
            results[nodes] = anyio.run(measure, cluster.address, args.env, args.n, args.calls)
        finally:
            cluster.shutdown()
        print(f"Ray, {nodes} node(s): {results[nodes]}", flush=True)
    base, one, three = results["docker"], results[1], results[3]
    print(f"\nload average (1, 5, 15 min) at the end: {os.getloadavg()}")
    print(
        f"| what ({args.n} at once, cold, + first call) | Docker backend | Ray, 1 node | Ray, 3 nodes | 3 vs 1 |"
    )
    print("| --- | --- | --- | --- | --- |")
    for key, label in (
        ("container", "container tier, sandboxes/s"),
        ("instance", "instance tier, sandboxes/s"),
    ):
        row = f"{base[key]:.2f} | {one[key]:.2f} | {three[key]:.2f} | {three[key] / one[key]:.2f}x"
        print(f"| {label} | {row} |")
    print(f"| container tier, sandboxes per node | | {one['spread']} | {three['spread']} | |")
    for key, label in (
        ("direct", "tool call, runtime client"),
        ("gateway", "tool call, through the gateway"),
    ):
        print(f"| {label}, p50 ms | {base[key]:.2f} | {one[key]:.2f} | {three[key]:.2f} | |")


if __name__ == "__main__":
    main()
