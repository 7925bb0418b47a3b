"""Probes run inside an environment's container (``docker exec``, as the container's own user): what the
process is, what it may write, what it can reach, and its network namespace's traffic counters."""

from __future__ import annotations

import json
from typing import Any

import anyio

# Counters of the container's network namespace that move only when something inside it *opens* traffic:
# the environment server only answers (passive opens), so any of these moving means a tool reached out.
OUTBOUND_COUNTERS = (
    "Tcp.ActiveOpens",
    "Udp.OutDatagrams",
    "UdpLite.OutDatagrams",
    "Ip.OutNoRoutes",
    "Udp6OutDatagrams",
    "UdpLite6OutDatagrams",
    "Ip6OutNoRoutes",
)

COUNTERS = """
import json
out = {}
try:
    lines = open("/proc/net/snmp").read().splitlines()
    for head, values in zip(lines[::2], lines[1::2]):
        keys, nums = head.split(), values.split()
        for k, v in zip(keys[1:], nums[1:]):
            out[keys[0].rstrip(":") + "." + k] = int(v)
except OSError:
    pass
try:
    for line in open("/proc/net/snmp6").read().splitlines():
        k, v = line.split()
        out[k] = int(v)
except OSError:
    pass
print(json.dumps(out))
"""

SANDBOX = """
import json, os, socket, sys, threading
targets = json.loads(sys.argv[1])
out = {"exec_uid": os.getuid(), "reach": {}, "writes": {}}
for line in open("/proc/1/status").read().splitlines():
    if line.startswith(("Uid:", "Gid:")):
        out[line[:3].lower()] = [int(x) for x in line.split()[1:]]
    if line.startswith("CapEff:"):
        out["cap_eff"] = line.split()[1]
for line in open("/proc/1/mountinfo").read().splitlines():
    fields = line.split()
    if fields[4] == "/":
        out["root_mount"] = fields[5]
for path in ("/probe-envreg", "/env/probe-envreg", "/usr/probe-envreg", "/opt/probe-envreg"):
    try:
        with open(path, "w") as f:
            f.write("x")
        os.unlink(path)
        out["writes"][path] = "written"
    except OSError as exc:
        out["writes"][path] = f"{type(exc).__name__}: {exc.strerror}"

def reach(name, host, port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(3)
    try:
        s.connect((host, port))
        out["reach"][name] = "open"
    except OSError as exc:
        out["reach"][name] = type(exc).__name__
    finally:
        s.close()

def resolve(name, host):
    try:
        socket.getaddrinfo(host, 443)
        out["reach"][name] = "resolved"
    except OSError as exc:
        out["reach"][name] = type(exc).__name__

threads = [threading.Thread(target=reach, args=(n, h, p)) for n, (h, p) in targets.items()]
threads.append(threading.Thread(target=resolve, args=("DNS lookup of deb.debian.org", "deb.debian.org")))
for t in threads:
    t.start()
for t in threads:
    t.join()
print(json.dumps(out))
"""


class ProbeError(Exception):
    pass


PROBE_ATTEMPTS = 3


# DNS in a sandbox has no upstream: without this the C resolver waits out its default timeouts (~10 s)
# before failing. A resolver that works answers in milliseconds, so a short timeout hides nothing.
FAST_RESOLVER = {"RES_OPTIONS": "timeout:2 attempts:1"}


async def run_python(
    container: Any, script: str, *args: str, environment: dict[str, str] | None = None
) -> dict[str, Any]:
    """Run a Python script inside the container with its own python3; its JSON output. The scripts only
    read, so one whose output the engine lost (exit 0, nothing printed: Docker 20.10 under load) runs again."""

    def go() -> tuple[int, bytes]:
        result = container.exec_run(["python3", "-c", script, *args], demux=False, environment=environment)
        return result.exit_code, result.output

    for _ in range(PROBE_ATTEMPTS):
        code, output = await anyio.to_thread.run_sync(go)
        if code != 0:
            raise ProbeError(f"probe exited {code}: {output.decode(errors='replace')[-500:]}")
        if output.strip():
            return json.loads(output)
    raise ProbeError(f"probe printed nothing {PROBE_ATTEMPTS} times (exit 0): the engine lost its output")


async def counters(container: Any) -> dict[str, int]:
    """The container's outbound traffic counters (`OUTBOUND_COUNTERS`)."""
    found = await run_python(container, COUNTERS)
    return {k: found.get(k, 0) for k in OUTBOUND_COUNTERS}


def moved(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """The counters that moved, and by how much."""
    return {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}


async def sandbox_facts(container: Any, targets: dict[str, tuple[str, int]]) -> dict[str, Any]:
    return await run_python(container, SANDBOX, json.dumps(targets), environment=FAST_RESOLVER)
