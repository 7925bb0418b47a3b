"""`main()`: the argument parser behind `python -m envreg.images build-base | lock-wheels | wheelhouse`."""

from __future__ import annotations

import argparse
import sys

from envreg.images.base import build_base_rootfs
from envreg.images.paths import ImageBuildError, paths
from envreg.images.wheels import build_envreg_wheel, fetch_wheelhouse, lock_wheels


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="envreg-images")
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser(
        "build-base", help="Build (or verify) the pinned base rootfs and load it into the engine."
    )
    b.add_argument(
        "--relock", action="store_true", help="Write images/base/base.lock from what Debian gives now."
    )
    b.add_argument("--fresh", action="store_true", help="Ignore the cached debootstrap rootfs.")
    sub.add_parser(
        "lock-wheels", help="Resolve the server dependencies and write images/base/requirements.lock."
    )
    sub.add_parser(
        "wheelhouse", help="Download the locked wheels into .cache/wheelhouse and build the envreg wheel."
    )
    args = ap.parse_args(argv)
    try:
        if args.cmd == "build-base":
            from envreg.docker_engine import require_engine

            require_engine(buildx=False)
            lock = build_base_rootfs(relock=args.relock, fresh=args.fresh)
            print(
                f"{lock.image} {lock.image_id} ({lock.size / 1e6:.0f} MB tar, {len(lock.packages)} packages)"
            )
        elif args.cmd == "lock-wheels":
            lock_wheels()
        elif args.cmd == "wheelhouse":
            have = fetch_wheelhouse()
            whl = build_envreg_wheel()
            print(f"{len(have)} locked wheels + {whl.name} in {paths().wheelhouse}")
    except ImageBuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:
        if type(exc).__name__ == "EngineUnavailable":
            print(f"error: {exc}", file=sys.stderr)
            return 1
        raise
    return 0
