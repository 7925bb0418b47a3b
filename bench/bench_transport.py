"""What one request/answer round trip costs the kernel between two processes: TCP on loopback vs a Unix socket.

The floor under every hop of a tool call (client -> gateway -> environment server and back): two processes,
blocking sockets, a 500-byte request answered by 450 bytes (a `tools/call` and its answer), nothing parsed.
It prints the median round trip of each transport, alternating them, and the same with both processes held
on one CPU (`--one-cpu`: no wake-up of another CPU per message), and into a container (`--container IMAGE`:
to its IP on an internal Docker network, and to a Unix socket in a host folder mounted into it, as the
gateway reaches a sandbox container). Figures are printed, never asserted.

    .venv/bin/python bench/bench_transport.py [--trips 6000] [--rounds 3] [--one-cpu] [--container envreg/base:0.1.0]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import tempfile
import time
from pathlib import Path

REQUEST, ANSWER = b"x" * 500, b"y" * 450


def answer_all(listener: socket.socket) -> None:
    conn, _ = listener.accept()
    if conn.family == socket.AF_INET:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    while conn.recv(65536):
        conn.sendall(ANSWER)


def round_trips(family: socket.AddressFamily, trips: int, folder: Path) -> float:
    """Median microseconds per round trip over `trips` (the first tenth not counted)."""
    listener = socket.socket(family, socket.SOCK_STREAM)
    if family == socket.AF_INET:
        listener.bind(("127.0.0.1", 0))
    else:
        (folder / "s").unlink(missing_ok=True)
        listener.bind(str(folder / "s"))
    listener.listen()
    child = os.fork()
    if child == 0:
        try:
            answer_all(listener)
        finally:
            os._exit(0)
    took = client_trips(family, listener.getsockname(), trips)
    os.waitpid(child, 0)
    listener.close()
    return took


ANSWERER = f"""
import os, socket, threading
def serve(listener):
    while True:
        conn, _ = listener.accept()
        if conn.family == socket.AF_INET:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        while conn.recv(65536):
            conn.sendall(b"y" * {len(ANSWER)})
unix = socket.socket(socket.AF_UNIX)
unix.bind("/run/envreg/s")
unix.listen()
threading.Thread(target=serve, args=(socket.create_server(("0.0.0.0", 9000)),), daemon=True).start()
serve(unix)
"""


def client_trips(family: socket.AddressFamily, address: object, trips: int) -> float:
    """Median microseconds per round trip to a listener that answers every request (`ANSWERER`)."""
    client = socket.socket(family, socket.SOCK_STREAM)
    client.connect(address)
    if family == socket.AF_INET:
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    took = []
    for _ in range(trips):
        start = time.perf_counter()
        client.sendall(REQUEST)
        got = 0
        while got < len(ANSWER):
            got += len(client.recv(65536))
        took.append(time.perf_counter() - start)
    client.close()
    return statistics.median(took[trips // 10 :]) * 1e6


def into_a_container(image: str, trips: int, rounds: int) -> None:
    """The same round trip into a sandbox-like container (uid 65534, an internal network): to its IP over
    the bridge, and to a Unix socket in a host folder mounted into it, as the gateway's lane reaches one."""
    import docker

    engine = docker.from_env()
    network = engine.networks.create(f"envreg-bench-{os.getpid()}", internal=True)
    with tempfile.TemporaryDirectory(dir="/dev/shm") as folder:
        os.chmod(folder, 0o777)
        container = engine.containers.run(image, ["python3", "-c", ANSWERER], detach=True, user="65534:65534",
                                          network=network.name, volumes={folder: {"bind": "/run/envreg"}})  # fmt: skip
        try:
            while not os.path.exists(f"{folder}/s"):
                time.sleep(0.05)
            container.reload()
            ip = container.attrs["NetworkSettings"]["Networks"][network.name]["IPAddress"]
            time.sleep(0.5)  # its TCP listener, bound right after
            tcp = [client_trips(socket.AF_INET, (ip, 9000), trips) for _ in range(rounds)]
            unix = [client_trips(socket.AF_UNIX, f"{folder}/s", trips) for _ in range(rounds)]
        finally:
            container.remove(force=True)
            network.remove()
    t, u = statistics.median(tcp), statistics.median(unix)
    print(f"{'container':<9} round trip p50: TCP to its IP {t:6.1f} us   Unix socket {u:6.1f} us   "
          f"TCP costs {t - u:+.1f} us ({t / u:.1f}x)")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trips", type=int, default=6000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--one-cpu", action="store_true", help="also measure with both processes on CPU 0")
    parser.add_argument("--container", metavar="IMAGE", help="also into a container of IMAGE (python3 in it)")
    args = parser.parse_args()
    settings = [("any CPU", None)] + ([("one CPU", {0})] if args.one_cpu else [])
    everywhere = os.sched_getaffinity(0)
    with tempfile.TemporaryDirectory() as tmp:
        for label, cpus in settings:
            os.sched_setaffinity(0, cpus or everywhere)
            tcp, unix = [], []
            for _ in range(args.rounds):
                tcp.append(round_trips(socket.AF_INET, args.trips, Path(tmp)))
                unix.append(round_trips(socket.AF_UNIX, args.trips, Path(tmp)))
            t, u = statistics.median(tcp), statistics.median(unix)
            print(f"{label:<9} round trip p50: TCP loopback {t:6.1f} us   Unix socket {u:6.1f} us   "
                  f"TCP costs {t - u:+.1f} us ({t / u:.1f}x)")  # fmt: skip
        os.sched_setaffinity(0, everywhere)
    if args.container:
        into_a_container(args.container, args.trips, args.rounds)
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"{os.cpu_count()} CPUs, load average {load}; {args.rounds} x {args.trips} round trips per row")


if __name__ == "__main__":
    main()
