"""Cold start of environment images: `docker run` until the first successful MCP tool call.

For each environment image (default: the three reference environments), interleaved with a bare
`docker run --rm envreg/base true` (the engine's own floor), over N runs:
  t0 = `docker run -d` of the image (read-only rootfs, tmpfs /tmp, port 8000 on 127.0.0.1)
  t1 = the first `tools/call` (raw HTTP POST, protocol 2026-07-28, sessionless) that returns a result
Prints p50 / p99 of both, their ratio, and the image sizes. Needs the images (`envreg build`).

    python bench/bench_cold_start.py [--runs 10] [NAMES...]
"""

from __future__ import annotations

import argparse
import json
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


def cold_start(image: str, call: tuple[str, dict], timeout: float = 60) -> float:
    body, headers = call_body(*call)
    t0 = time.perf_counter()
    cid = docker(
        "run", "-d", "--read-only", "--tmpfs", "/tmp:size=16m", "-p", "127.0.0.1:0:8000",
        "-e", f"ENVREG_TOKEN={TOKEN}", "--label", "envreg.bench=cold-start", image,
    )  # fmt: skip
    try:
        port = int(docker("port", cid, "8000/tcp").splitlines()[0].rsplit(":", 1)[1])
        url = f"http://127.0.0.1:{port}/mcp"
        with httpx2.Client(timeout=5) as http:
            while True:
                try:
                    r = http.post(url, content=body, headers=headers)
                    if r.status_code == 200 and '"result"' in r.text and '"isError":true' not in r.text:
                        return time.perf_counter() - t0
                except httpx2.HTTPError:
                    pass
                if time.perf_counter() - t0 > timeout:
                    raise SystemExit(
                        f"{image}: no successful tools/call within {timeout}s:\n{docker('logs', cid)}"
                    )
                time.sleep(0.02)
    finally:
        subprocess.run(["docker", "rm", "-f", cid], capture_output=True)


def bare_run(image: str) -> float:
    t0 = time.perf_counter()
    docker("run", "--rm", image, "true")
    return time.perf_counter() - t0


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(q * (len(xs) - 1))))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("names", nargs="*", default=["calendar", "airline", "bank"])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--base", default="envreg/base:latest")
    args = ap.parse_args()

    sys.path.insert(0, str(ROOT))
    from envreg.docker_engine import EngineUnavailable, require_engine

    try:
        require_engine()
    except EngineUnavailable as exc:
        raise SystemExit(f"error: {exc}") from None
    images, tools = {}, {}
    for name in args.names:
        manifest = json.loads((ROOT / "manifests" / f"{name}.json").read_text())
        images[name] = f"envreg/{name}:{manifest['version']}"
        tools[name] = pick_call(name, manifest)
    for image in [args.base, *images.values()]:
        if not docker("images", "-q", image):
            raise SystemExit(f"error: {image} is not built: run `envreg build`")

    bare_run(args.base)  # warm the engine's caches once
    bare: list[float] = []
    cold: dict[str, list[float]] = {n: [] for n in images}
    for _ in range(args.runs):
        for name, image in images.items():
            bare.append(bare_run(args.base))
            cold[name].append(cold_start(image, tools[name]))

    ms = 1000
    print(f"\ncold start, {args.runs} runs each (docker run -> first successful MCP tools/call), ms")
    print(f"{'what':<42} {'p50':>8} {'p99':>8} {'x bare p50':>11}")
    b50 = statistics.median(bare)
    print(
        f"{'docker run --rm ' + args.base + ' true':<42} {b50 * ms:>8.0f} {pct(bare, 0.99) * ms:>8.0f} {1:>11.1f}"
    )
    for name, xs in cold.items():
        p50 = statistics.median(xs)
        label = f"{images[name]} ({tools[name][0]})"
        print(f"{label:<42} {p50 * ms:>8.0f} {pct(xs, 0.99) * ms:>8.0f} {p50 / b50:>11.1f}")

    print("\nimage sizes")
    rootfs = json.loads((ROOT / "images/base/base.lock").read_text())["variable"]["BASE_IMAGE"]["default"]
    for image in [rootfs, args.base, *images.values()]:
        size = int(docker("image", "inspect", "--format", "{{.Size}}", image))
        print(f"{image[:60]:<62} {size / 1e6:>7.0f} MB")


if __name__ == "__main__":
    main()
