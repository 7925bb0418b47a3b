"""Where an envreg environment server's CPU goes per tool call, by stage: a py-spy profile under load.

Figures are printed, never asserted. Run from the repository root (after `bench/setup-bench-venv`):

    .venv-bench/bin/python bench/profile_server.py [--seconds 10] [--concurrency 50] [--calls 600]

It starts the lean server of `bench/bench_server.py` (`envreg serve-env tests/fixtures/counter`), drives
`tools/call increment` on 50 keep-alive connections (one instance each) with that benchmark's raw-socket
client, samples the server with py-spy meanwhile, and sorts every sample into the stage of its innermost
frame that names one (`STAGES`).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_server

STAGES: list[tuple[str, tuple[str, ...]]] = [
    # (stage, names of frames): a sample's stage is that of its innermost frame that names one (the first such
    # stage in this order)
    ("answer: JSON serialize", ("dumps (json", "_envelope (envreg/server/lean.py", "JSONEncoder")),
    ("tool: argument validation", ("Tool.parse_arguments", "Limits.argument_problem")),
    ("tool: result to MCP", ("ToolResult.to_mcp", "Tool.to_result", "TypeAdapter.dump_python")),
    ("tool: state transaction, change check", ("Transaction", "check_changes", "Commit", "_field_size")),
    ("tool: the tool's own code", ("Tool.invoke",)),
    ("tool: dispatch, budgets", ("InstanceStore.call_tool", "Instance.call_tool", "Instance._run")),
    (
        "request: MCP checks (headers, envelope; the JSON read and written by pydantic-core, in C)",
        ("LeanPath", "header_name"),
    ),
    (
        "request: route, token, lease",
        ("AgentLane.begin", "instance_id_from_path", "parse_bearer", "tokens_match"),
    ),
    ("socket write (send(2); on loopback it carries the reader's TCP work too)", ("FastProtocol.write",)),
    ("HTTP: parse head, build answer head", ("parse_head", "FastProtocol", "Answer.start")),
    ("ASGI (control plane: instance setup)", ("run_asgi",)),
]
LOOP = "event loop and socket syscalls (uvloop, C)"


def stage_of(frames: list[str]) -> str:
    for frame in reversed(frames):
        for stage, names in STAGES:
            if any(name in frame for name in names):
                return stage
    return LOOP if frames and "Runner.run" in frames[-1] else "other"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument(
        "--calls", type=int, default=600, help="calls per connection (sampled for --seconds at most)"
    )
    args = parser.parse_args()
    bench_server.ensure_bench_venv()
    import uvloop
    from rich.console import Console
    from rich.table import Table

    spy_bin = Path(sys.prefix) / "bin" / "py-spy"
    if not spy_bin.exists():
        sys.exit("py-spy is not installed here: `bench/setup-bench-venv` installs it into .venv-bench")
    server = bench_server.envreg_server(
        str(bench_server.ROOT / "tests" / "fixtures" / "counter"), fast_path=True
    )
    server.start()
    assert server.proc is not None
    with tempfile.NamedTemporaryFile(
        suffix=".folded",
    ) as out:
        spy = subprocess.Popen(
            [str(spy_bin), "record", "--pid", str(server.proc.pid), "--rate", "1000", "--nonblocking", "--format", "raw",
             "-o", out.name, "--duration", str(args.seconds)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        time.sleep(1)  # py-spy attached
        try:  # one load: its connections and instances are made once, before the timed calls
            result = uvloop.run(bench_server.measure(server, "load", args.concurrency, args.calls, warmup=5))
            calls, cpu = result.calls, result.server_cpu_s
        finally:
            spy.wait()
            server.stop()
        samples: Counter[str] = Counter()
        for line in Path(out.name).read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            samples[stage_of(stack.split(";"))] += int(count)
    total = sum(samples.values()) or 1
    per_call = cpu / calls * 1e3 if calls else 0.0
    table = Table(title=f"envreg lean server, {args.concurrency} connections: {per_call:.3f} ms CPU per call")
    table.add_column("stage")
    table.add_column("share", justify="right")
    table.add_column("ms per call", justify="right")
    for stage, n in samples.most_common():
        table.add_row(stage, f"{100 * n / total:.1f} %", f"{per_call * n / total:.3f}")
    Console(width=120).print(table)
    print(f"{total} samples, {calls} calls timed. py-spy samples Python frames without stopping the server")
    print(
        "(--nonblocking: a stopped server would spend its CPU otherwise); time in C shows as the Python frame that"
    )
    print("called it (json, pydantic-core, a send), uvloop's own (epoll, recv) as the event loop's frame.")


if __name__ == "__main__":
    main()
