"""The sandbox network: internal (no route out), no traffic between containers, and no way into the host.

A Docker bridge network, even an internal one, gives the host an address on it: containers could
reach any host service bound to 0.0.0.0 through it. Each network gets its own bridge device name and
one firewall rule that refuses every *new* connection arriving from that device (the host still
opens connections to containers; their answers are established traffic). The rule carries the
network's name as a comment and is removed with the network, by the runtime or by `envreg gc`.
"""

from __future__ import annotations

import contextlib
import shlex
import shutil
import subprocess
import time
from collections.abc import Callable, Iterable
from typing import Any

from envreg.errors import EngineError

BRIDGE_OPTION = "com.docker.network.bridge.name"
NETWORK_PREFIX = "envreg-rt_"  # a runtime's network: envreg-<runtime id>
PHANTOM_AFTER = 10.0


class PhantomEndpoint(EngineError):
    """The engine refuses to remove a network for an endpoint it does not list (Docker 20.10 leaks one now and
    then when many containers of a network are removed at once): only restarting the engine drops it. The
    network holds no container, so it isolates nothing and exposes nothing."""


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


def remove_network(
    network: Any,
    containers: Iterable[str] = (),
    *,
    sweep: Callable[[], object] | None = None,
    timeout: float = 60.0,
) -> None:
    """Remove a sandbox network and its firewall rule (both idempotent).

    `sweep` runs before every try (removing the containers that still hold it). Endpoints still on it are
    forced out, those it lists and one per name in `containers` (the containers it
    held: a removal that raced with others can leave an endpoint no container owns, and Docker 20.10 deletes
    it only when asked by its container's name), retrying until `timeout` (the engine can be slow to drop the
    endpoints of fifty containers removed at once); then `EngineError` names the endpoints left. When the
    engine refuses for `PHANTOM_AFTER` seconds while listing no endpoint at all, `PhantomEndpoint`."""
    import docker.errors

    deadline = time.monotonic() + timeout
    unlisted_since: float | None = None  # since when the engine refuses while listing no endpoint
    while True:
        if sweep is not None:
            sweep()
        try:
            network.remove()
            break
        except docker.errors.NotFound:
            break
        except docker.errors.APIError as exc:  # "has active endpoints"
            with contextlib.suppress(docker.errors.APIError):
                network.reload()
            listed = sorted(
                n for info in (network.attrs.get("Containers") or {}).values() if (n := info.get("Name"))
            )
            for name in sorted({*listed, *containers}):
                with contextlib.suppress(docker.errors.APIError):
                    network.disconnect(name, force=True)
            now = time.monotonic()
            if listed:
                unlisted_since = None
            elif unlisted_since is None:
                unlisted_since = now
            if unlisted_since is not None and now - unlisted_since > PHANTOM_AFTER:
                raise PhantomEndpoint(
                    f"network {network.name} cannot be removed: the engine counts an endpoint on it that no "
                    f"container holds ({exc.explanation}); nothing can reach or use it",
                    "a Docker 20.10 bug: restarting the engine drops it (then `envreg gc`); no sandbox is affected",
                ) from exc
            if now > deadline:
                raise EngineError(
                    f"could not remove network {network.name}: endpoints still on it: {', '.join(listed)} "
                    f"({exc.explanation})",
                    "run `envreg gc`: it removes the network and its firewall rule",
                ) from exc
            time.sleep(0.5)
    bridge = (network.attrs.get("Options") or {}).get(BRIDGE_OPTION)
    if bridge:
        while _iptables("-D", _rule(bridge, network.name)).returncode == 0:
            pass


def remove_orphan_rules(networks: Iterable[str]) -> list[str]:
    """Remove the firewall rules of sandbox networks that no longer exist (`networks`: those that do, by
    name); returns the names of the networks whose rules went. Without iptables, nothing."""
    if shutil.which("iptables") is None:
        return []
    listing = subprocess.run(["iptables", "-w", "-S", "INPUT"], capture_output=True, text=True, timeout=30)
    gone: list[str] = []
    for line in listing.stdout.splitlines():
        spec = shlex.split(line)  # -A INPUT -i er-... -m comment --comment envreg-rt_... -j REJECT ...
        if spec[:2] != ["-A", "INPUT"] or "--comment" not in spec or "REJECT" not in spec:
            continue
        comment = spec[spec.index("--comment") + 1]
        if not comment.startswith(NETWORK_PREFIX) or comment in networks:
            continue
        if (
            subprocess.run(["iptables", "-w", "-D", *spec[1:]], capture_output=True, timeout=30).returncode
            == 0
        ):
            gone.append(comment)
    return gone
