"""Cold start of environment images: `docker run` until the first successful MCP tool call.

For each environment image (default: the three reference environments), interleaved with a bare
`docker run --rm --entrypoint true` of the same image (the engine's own floor), over N runs:
  t0 = `docker run -d` of the image (read-only rootfs, tmpfs /tmp, port 8000 on 127.0.0.1)
  t1 = the first `tools/call` (raw HTTP POST, protocol 2026-07-28, sessionless) that returns a result
twice: with the image's entry point (`python -m envreg.server`, now) and with the previous one
(`envreg serve-env` through the whole CLI, pydantic plugins looked up), in alternating order.
With --trace, the server reports where its start went (ENVREG_STARTUP_TRACE=1): the engine until the
process exists, the process until Python runs envreg, imports, the environment, listening; then the
first call. Prints p50 / p99, the ratio to the bare run, and the image sizes. Needs the images.

    python bench/bench_cold_start.py [--runs 10] [--trace] [--image calendar=IMAGE] [NAMES...]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx2

ROOT = Path(__file__).resolve().parent.parent
MODERN = "2026-07-28"
TOKEN = "bench-cold-start"


def docker(*args: str, check: bool = True) -> str:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=check).stdout.strip()


def pick_call(name: str, manifest: dict) -> tuple[str, dict]:
    """A call that succeeds on the seed state: a read-only tool without required arguments, else the first
    successful step of a scenario that starts from the seed."""
    for t in manifest["tools"]:
        if t.get("annotations", {}).get("readOnlyHint") and not t["inputSchema"].get("required"):
            return t["name"], {}
    from envreg.env import load_environment, load_scenarios

    scenarios, _ = load_scenarios(load_environment(ROOT / "images" / name).folder)
    for sc in scenarios:
        if sc.initial_state is None and sc.steps and sc.steps[0].expect_error is None:
            return sc.steps[0].tool, sc.steps[0].arguments
    raise SystemExit(f"{name}: found no call that succeeds on the seed state")


def call_body(tool: str, arguments: dict) -> tuple[bytes, dict[str, str]]:
    params = {
        "name": tool,
        "arguments": arguments,
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": {},
        },
    }
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}).encode()
    headers = {
        "content-type": "application/json",
        "accept": "application/json, text/event-stream",
        "mcp-protocol-version": MODERN,
        "mcp-method": "tools/call",
        "mcp-name": tool,
    }
    return body, headers


PREVIOUS = ["--entrypoint", "envreg", "-e", "PYDANTIC_DISABLE_PLUGINS="]
PREVIOUS_CMD = ["serve-env", "/env", "--host", "0.0.0.0", "--port", "8000", "--control-port", "8001"]


def boottime() -> float:
    return time.clock_gettime(time.CLOCK_BOOTTIME)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cold_start(image: str, call: tuple[str, dict], previous: bool = False, trace: bool = False,
               timeout: float = 60) -> tuple[float, dict]:  # fmt: skip
    """Seconds from `docker run` to the first successful tool call, and where they went (with `trace`)."""
    body, headers = call_body(*call)
    port = free_port()
    extra = ["-e", "ENVREG_STARTUP_TRACE=1"] if trace else []
    t0, b0 = time.perf_counter(), boottime()
    cid = docker(
        "run", "-d", "--read-only", "--tmpfs", "/tmp:size=16m", "-p", f"127.0.0.1:{port}:8000",
        "-e", f"ENVREG_TOKEN={TOKEN}", "--label", "envreg.bench=cold-start", *extra,
        *(PREVIOUS if previous else []), image, *(PREVIOUS_CMD if previous else []),
    )  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}/mcp"
        with httpx2.Client(timeout=5) as http:
            while True:
                try:
                    r = http.post(url, content=body, headers=headers)
                    if r.status_code == 200 and '"result"' in r.text and '"isError":true' not in r.text:
                        elapsed = time.perf_counter() - t0
                        break
                except httpx2.HTTPError:
                    pass
                if time.perf_counter() - t0 > timeout:
                    raise SystemExit(
                        f"{image}: no successful tools/call within {timeout}s:\n{docker('logs', cid)}"
                    )
                time.sleep(0.005)
        phases: dict = {}
        if trace:
            for line in subprocess.run(
                ["docker", "logs", cid], capture_output=True, text=True
            ).stderr.splitlines():
                if line.startswith('{"envreg_startup"'):
                    steps = json.loads(line)["envreg_startup"]
                    started = steps.get("process_start", b0 + elapsed - steps["total_ms"] / 1e3)
                    phases = {
                        "engine": started - b0,
                        "process until envreg runs": steps["python_ms"] / 1e3,
                        "imports": steps["imports_ms"] / 1e3,
                        "environment": steps["environment_ms"] / 1e3,
                        "listening": steps["listening_ms"] / 1e3,
                    }
                    phases["first call"] = elapsed - sum(phases.values())
        return elapsed, phases
    finally:
        subprocess.run(["docker", "rm", "-f", cid], capture_output=True)


def bare_run(image: str) -> float:
    t0 = time.perf_counter()
    docker("run", "--rm", "--entrypoint", "true", image)
    return time.perf_counter() - t0


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(q * (len(xs) - 1))))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("names", nargs="*", default=["calendar", "airline", "bank"])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--trace", action="store_true", help="report where the start goes (its own runs)")
    ap.add_argument("--image", action="append", default=[], help="NAME=IMAGE: run this image for NAME")
    args = ap.parse_args()

    sys.path.insert(0, str(ROOT))
    from envreg.docker_engine import EngineUnavailable, require_engine

    try:
        require_engine()
    except EngineUnavailable as exc:
        raise SystemExit(f"error: {exc}") from None
    chosen = dict(item.split("=", 1) for item in args.image)
    images, tools = {}, {}
    for name in args.names:
        manifest = json.loads((ROOT / "manifests" / f"{name}.json").read_text())
        images[name] = chosen.get(name, f"envreg/{name}:{manifest['version']}")
        tools[name] = pick_call(name, manifest)
    for image in images.values():
        if not docker("images", "-q", image):
            raise SystemExit(f"error: {image} is not built: run `envreg build`")

    for image in images.values():
        bare_run(image)  # warm the engine's caches once per image
    bare: dict[str, list[float]] = {n: [] for n in images}
    now: dict[str, list[float]] = {n: [] for n in images}
    before: dict[str, list[float]] = {n: [] for n in images}
    for i in range(args.runs):
        for name, image in images.items():
            bare[name].append(bare_run(image))
            order = (False, True) if i % 2 else (True, False)
            for previous in order:
                elapsed, _ = cold_start(image, tools[name], previous=previous)
                (before if previous else now)[name].append(elapsed)

    ms = 1000
    print(f"\ncold start, {args.runs} runs each (docker run -> first successful MCP tools/call), ms; "
          f"bare = docker run --rm --entrypoint true of the same image")  # fmt: skip
    print(f"{'image (tool)':<44} {'bare p50':>9} {'now p50':>8} {'p99':>6} {'x bare':>7} "
          f"{'before p50':>11} {'p99':>6} {'x bare':>7}")  # fmt: skip
    for name in images:
        b50 = statistics.median(bare[name])
        n50, o50 = statistics.median(now[name]), statistics.median(before[name])
        label = f"{images[name][:30]} ({tools[name][0]})"
        print(f"{label:<44} {b50 * ms:>9.0f} {n50 * ms:>8.0f} {pct(now[name], 0.99) * ms:>6.0f} "
              f"{n50 / b50:>7.2f} {o50 * ms:>11.0f} {pct(before[name], 0.99) * ms:>6.0f} {o50 / b50:>7.2f}")  # fmt: skip

    if args.trace:
        print("\nwhere the start goes (p50 over its own runs, ms)")
        for name, image in images.items():
            for previous in (False, True):
                runs = [
                    cold_start(image, tools[name], previous=previous, trace=True)[1] for _ in range(args.runs)
                ]
                runs = [r for r in runs if r]
                if not runs:
                    continue
                cells = ", ".join(f"{k} {statistics.median(r[k] for r in runs) * ms:.0f}" for k in runs[0])
                print(f"{name} ({'before' if previous else 'now'}): {cells}")

    print("\nimage sizes")
    rootfs = json.loads((ROOT / "images/base/base.lock").read_text())["variable"]["BASE_IMAGE"]["default"]
    for image in [rootfs, *images.values()]:
        size = int(docker("image", "inspect", "--format", "{{.Size}}", image))
        print(f"{image[:60]:<62} {size / 1e6:>7.0f} MB")
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"{os.cpu_count()} CPUs, load average {load}")


if __name__ == "__main__":
    main()
