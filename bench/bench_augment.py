"""What one augmentation config costs (`envreg.reward.augment.augmentation_for` with distractors, as an
augmentation run asks for one per record and environment): ms per call by similarity, with the default
catalog (the manifests) and with a catalog given, this checkout beside another one (`--before DIR`, in a
subprocess with that folder first on sys.path).

    .venv/bin/python bench/bench_augment.py [--calls 100] [--before DIR] [--embed tfidf graph]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from side_by_side import measured_in, print_beside

ENVS = ("bank", "calendar", "maps", "shop")


def measure(embeds: list[str], calls: int) -> dict[str, float]:
    """Seconds per call, after one warm-up call per case (the embedding model's load is not counted)."""
    from envreg.reward.augment import augmentation_for, load_catalog

    given = load_catalog()
    out: dict[str, float] = {}
    for embed in embeds:
        for label, catalog in (("default catalog", None), ("catalog given", given)):
            for env in ENVS:
                augmentation_for(env, distractors=3, embed=embed, catalog=catalog)  # type: ignore[arg-type]
            began = time.perf_counter()
            for seed in range(calls):
                env = ENVS[seed % len(ENVS)]
                augmentation_for(env, seed=seed, distractors=3, embed=embed, catalog=catalog)  # type: ignore[arg-type]
            out[f"{embed}, {label}"] = (time.perf_counter() - began) / calls
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=100)
    ap.add_argument("--embed", nargs="+", default=["tfidf", "graph"], help="similarities (graph needs synth)")
    ap.add_argument("--before", type=Path, metavar="DIR", help="also this checkout's augmentation")
    ap.add_argument("--json", action="store_true", help=argparse.SUPPRESS)  # what --before reads back
    args = ap.parse_args()
    now = measure(args.embed, args.calls)
    if args.json:
        print(json.dumps(now))
        return
    argv = ["--calls", str(args.calls), "--embed", *args.embed]
    before = measured_in(args.before, __file__, argv) if args.before else {}
    title = f"ms per augmentation_for(distractors=3), {args.calls} calls over {', '.join(ENVS)}"
    print_beside(title, "similarity, catalog", now, before, 1e3, 2)


if __name__ == "__main__":
    main()
