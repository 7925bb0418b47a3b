"""``python -m envreg.standin``: serve the scripted stand-in model until interrupted."""

from __future__ import annotations

import argparse
import sys

from envreg.standin.scripts import SCRIPTS, Scripted
from envreg.standin.server import StandInLLM


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m envreg.standin",
        description="An OpenAI-compatible stand-in model that plays envreg tasks with scripted answers.",
    )
    parser.add_argument("--env", action="append", default=[], help="Play this environment's scenarios.")
    parser.add_argument("--tasks", action="append", default=[], help="Play the tasks (or records) in FILE.")
    parser.add_argument("--script", choices=SCRIPTS, default="oracle", help="How to answer (default oracle).")
    parser.add_argument("--host", default="127.0.0.1", help="Address to bind (default 127.0.0.1).")
    parser.add_argument("--port", type=int, default=8000, help="Port (0: any free one; default 8000).")
    parser.add_argument("--latency", type=float, default=0.0, help="Seconds before each answer (default 0).")
    parser.add_argument("--model", default="standin", help="Model name in the answers.")
    args = parser.parse_args(argv)

    from envreg.errors import EnvregError
    from envreg.rollout.task import read_tasks, scenario_tasks

    try:
        tasks = scenario_tasks(args.env) + [t for path in args.tasks for t in read_tasks(path)]
    except EnvregError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        if exc.hint:
            print(f"hint: {exc.hint}", file=sys.stderr)
        return 2
    if not tasks:
        print("error: nothing to play", file=sys.stderr)
        print("hint: give --env NAME (its scenarios) or --tasks FILE", file=sys.stderr)
        return 2
    llm = StandInLLM(
        Scripted(tasks, args.script),
        args.model,
        host=args.host,
        port=args.port,
        latency=args.latency,
        keep_requests=False,
    ).start()
    print(f"stand-in model {args.model!r} ({args.script}, {len(tasks)} tasks) at {llm.base_url}", flush=True)
    try:
        llm.thread.join()
    except KeyboardInterrupt:
        llm.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
