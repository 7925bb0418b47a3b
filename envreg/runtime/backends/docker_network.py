"""The sandbox network: internal (no route out), no traffic between containers, and no way into the host.

A Docker bridge network, even an internal one, gives the host an address on it: containers could
reach any host service bound to 0.0.0.0 through it. Each network gets its own bridge device name and
one firewall rule that refuses every *new* connection arriving from that device (the host still
opens connections to containers; their answers are established traffic). The rule carries the
network's name as a comment and is removed with the network, by the runtime or by `envreg gc`.
"""

from __future__ import annotations

import shutil
import subprocess
from typing import Any

from envreg.errors import EngineError

BRIDGE_OPTION = "com.docker.network.bridge.name"


def _rule(bridge: str, comment: str) -> list[str]:
    return [
        "INPUT", "-i", bridge, "-m", "conntrack", "--ctstate", "NEW",
        "-m", "comment", "--comment", comment, "-j", "REJECT",
    ]  # fmt: skip


def _iptables(action: str, rule: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["iptables", "-w", action, *rule], capture_output=True, text=True, timeout=30)


def create_network(client: Any, name: str, bridge: str, labels: dict[str, str]) -> Any:
    """An internal bridge network with inter-container traffic off and the host closed to it."""
    if shutil.which("iptables") is None:
        raise EngineError(
            "iptables is not installed: without it, sandboxes could reach services on this host",
            "install it (`apt-get install iptables`; scripts/setup-docker does) and run envreg as root",
        )
    network = client.networks.create(
        name,
        driver="bridge",
        internal=True,
        options={"com.docker.network.bridge.enable_icc": "false", BRIDGE_OPTION: bridge},
        labels=labels,
    )
    done = _iptables("-I", _rule(bridge, name))
    if done.returncode != 0:
        network.remove()
        raise EngineError(
            f"could not close this host to network {name}: iptables: {done.stderr.strip()}",
            "sandboxes need a firewall rule on the host: run envreg as root (or with CAP_NET_ADMIN)",
        )
    return network


def remove_network(network: Any) -> None:
    """Remove a sandbox network and its firewall rule (both idempotent)."""
    bridge = (network.attrs.get("Options") or {}).get(BRIDGE_OPTION)
    network.remove()
    if bridge:
        while _iptables("-D", _rule(bridge, network.name)).returncode == 0:
            pass
