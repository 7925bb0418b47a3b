"""What a 2025-11-25 session costs in a sandbox container, and a flood of sessions nobody DELETEs.

One instance-tier container (the default 256 MiB limit) of `--env`; sessions are opened through the
runtime's gateway as the TypeScript SDK opens them (initialize, initialized) and never DELETEd.

1. Cost: `--measure` sessions spread over 8 sandboxes (below every cap, so none is evicted); the
   container's RSS (its cgroup's, from the engine) before and after, per session.
2. Flood: `--flood` sessions from one sandbox while a co-tenant sandbox in the same container keeps
   calling a tool; the sessions kept, evictions, the container's peak RSS and whether it lived, and the
   co-tenant's calls and errors. With `--baseline IMAGE` (an image of the server before session caps,
   e.g. built from an older checkout with another ENVREG_IMAGE_PREFIX) the same flood runs against it,
   side by side.

    .venv/bin/python bench/bench_sessions.py [--env calendar] [--measure 1000] [--flood 6000] [--baseline REF]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "b", "version": "1"},
    },
}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
ACCEPT = {"content-type": "application/json", "accept": "application/json, text/event-stream"}


def rss(container) -> int:
    """The container's resident memory (cgroup v1 `rss`, v2 `anon`) in bytes."""
    stats = container.stats(stream=False)["memory_stats"]
    inner = stats.get("stats", {})
    return int(inner.get("rss", inner.get("anon", stats.get("usage", 0))))


async def open_sessions(http, sb, n: int) -> int:
    """Open `n` sessions on `sb` through the gateway; returns how many were opened."""
    auth = {"authorization": f"Bearer {sb.token}"}
    opened = 0
    for _ in range(n):
        try:
            r = await http.post(sb.mcp_url, json=INITIALIZE, headers={**ACCEPT, **auth})
        except Exception:
            break
        if r.status_code != 200:
            break
        headers = {**ACCEPT, **auth, "mcp-session-id": r.headers["mcp-session-id"]}
        await http.post(
            sb.mcp_url, json=INITIALIZED, headers={**headers, "mcp-protocol-version": "2025-11-25"}
        )
        opened += 1
    return opened


async def measure(env: str, n: int) -> None:
    import httpx2

    from envreg.runtime import Runtime

    async with Runtime() as rt, httpx2.AsyncClient(timeout=60) as http:
        sandboxes = [await rt.sandbox(env, isolation="instance") for _ in range(8)]
        container = sandboxes[0].server.handle
        for sb in sandboxes:  # the SDK started and warmed in the container before the baseline
            await open_sessions(http, sb, 2)
        await anyio.sleep(1)
        before = rss(container)
        per = n // len(sandboxes)
        for sb in sandboxes:
            await open_sessions(http, sb, per)
        await anyio.sleep(1)
        after = rss(container)
        health = (await sandboxes[0].server.client.healthz())["sessions"]
        cost = (after - before) / (per * len(sandboxes))
        print(f"cost: {per * len(sandboxes)} sessions over 8 sandboxes in one {env} container")
        print(
            f"  container RSS {before / 2**20:.1f} -> {after / 2**20:.1f} MiB: {cost / 1024:.1f} KiB per session"
        )
        print(
            f"  caps from its {health['memory_limit'] / 2**20:.0f} MiB limit: {health['max']} per server, "
            f"{health['max_per_instance']} per sandbox (budget 48 KiB a session: {48 * 1024 / cost:.2f}x the cost)"
        )


async def flood(env: str, n: int, image: str, label: str) -> dict:
    import httpx2

    from envreg.runtime import Runtime

    result: dict = {"label": label}
    async with Runtime() as rt, httpx2.AsyncClient(timeout=60) as http:
        flooder = await rt.sandbox(image, isolation="instance")
        tenant = await rt.sandbox(image, isolation="instance")
        container = flooder.server.handle
        calls, errors, peak = 0, 0, 0
        done = anyio.Event()

        async def work() -> None:
            nonlocal calls, errors
            while not done.is_set():
                try:
                    result = await tenant.call_tool("list_calendars" if env == "calendar" else "get", {})
                    errors += bool(result.is_error)
                except Exception:
                    errors += 1
                    await anyio.sleep(0.05)
                calls += 1

        async def watch() -> None:
            nonlocal peak
            while not done.is_set():
                try:
                    peak = max(peak, rss(container))
                except Exception:
                    return
                await anyio.sleep(0.5)

        started = time.monotonic()
        async with anyio.create_task_group() as tg:
            tg.start_soon(work)
            tg.start_soon(watch)
            result["opened"] = await open_sessions(http, flooder, n)
            done.set()
        result["seconds"] = time.monotonic() - started
        result["alive"] = flooder.ended is None and tenant.ended is None
        result.update(calls=calls, errors=errors, peak=peak / 2**20)
        try:
            result["sessions"] = (await tenant.server.client.healthz()).get("sessions")
        except Exception:
            result["sessions"] = None
    return result


def show(results: list[dict], n: int) -> None:
    print(f"flood: {n} sessions from one sandbox, a co-tenant calling a tool in the same container")
    for r in results:
        kept = r["sessions"]["open"] if r["sessions"] else "-"
        evicted = r["sessions"]["evicted"] if r["sessions"] else "-"
        print(
            f"  {r['label']:>9}: opened {r['opened']} in {r['seconds']:.1f} s, kept {kept}, evicted {evicted}, "
            f"peak RSS {r['peak']:.0f} MiB, container {'alive' if r['alive'] else 'DEAD'}, "
            f"co-tenant {r['calls']} calls / {r['errors']} errors"
        )
    if len(results) == 2 and results[1]["peak"]:
        print(f"  peak RSS now / baseline: {results[0]['peak'] / results[1]['peak']:.2f}x")


async def main(args: argparse.Namespace) -> None:
    if args.measure:
        await measure(args.env, args.measure)
    if args.flood:
        results = [await flood(args.env, args.flood, args.env, "now")]
        if args.baseline:
            results.append(await flood(args.env, args.flood, args.baseline, "baseline"))
        show(results, args.flood)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--env", default="calendar")
    parser.add_argument("--measure", type=int, default=1000)
    parser.add_argument("--flood", type=int, default=6000)
    parser.add_argument("--baseline", help="an image of the server before session caps")
    anyio.run(main, parser.parse_args())
