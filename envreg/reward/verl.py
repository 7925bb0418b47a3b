"""verl custom reward function: ``compute_score(data_source, solution_str, ground_truth, extra_info)``.

Point verl at this file (its path: ``python -c "import envreg.reward.verl as v; print(v.__file__)"``)::

    reward:                      # verl >= 0.6; older versions: top-level custom_reward_function
      custom_reward_function:
        path: /path/to/site-packages/envreg/reward/verl.py
        name: compute_score
        reward_kwargs: {alpha: 0.5, gamma: 0.1, isolation: local}

`ground_truth` is the RL row's ``reward_model.ground_truth``: the turn's oracle calls, facts and
answer (JSON text ``{"calls", "facts", "answer"}``; older exports: the list of calls) with the
states in `extra_info` (``envs``, ``initial_states``, ``final_states``, ``volatile``), as `envreg
synth` exports them, or a whole trajectory record as JSON text. `solution_str` is the decoded
response with its ``<tool_call>`` tags and its answer. The predicted calls are replayed in a
sandbox seeded from the record's initial state, on one runtime per process that lives in a background thread (verl calls reward
functions from worker threads). The result is a dict: ``score`` plus each component, which verl
logs as reward extra info.
"""

from __future__ import annotations

import atexit
import threading
from typing import Any

from envreg.reward.score import RewardBreakdown, ScoreOptions, Scorer
from envreg.reward.truth import read_truth

_OPTION_KEYS = set(ScoreOptions.model_fields)
_lock = threading.Lock()
_portal: Any = None
_portal_cm: Any = None
_scorers: dict[str, Scorer] = {}
_runtime: Any = None
_runtime_cm: Any = None


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: dict[str, Any] | None = None,
    *,
    isolation: str = "local",
    envs: dict[str, str] | None = None,
    **kwargs: Any,
) -> dict[str, float]:
    """Score one rollout; raises `ValueError` only for a ground truth that is not a record.

    Keyword arguments (verl's ``reward_kwargs``): the `ScoreOptions` fields (alpha, gamma, beta,
    ordered, partial_state, rel_tol, abs_tol), `isolation` and `envs` (name -> environment folder).
    Anything else verl passes is ignored.
    """
    options = ScoreOptions(**{k: v for k, v in kwargs.items() if k in _OPTION_KEYS})
    breakdown = score_breakdown(
        solution_str, read_truth(ground_truth, extra_info), options, isolation=isolation, envs=envs
    )
    return as_verl_result(breakdown)


def score_breakdown(
    solution_str: Any,
    ground_truth: Any,
    options: ScoreOptions | None = None,
    *,
    isolation: str = "local",
    envs: dict[str, str] | None = None,
) -> RewardBreakdown:
    """The full breakdown of one rollout, from any thread."""
    portal = _start()
    scorer = _scorer(portal, isolation, envs or {})
    return portal.call(lambda: scorer.score(ground_truth, solution_str, options))


def as_verl_result(b: RewardBreakdown) -> dict[str, float]:
    """``score`` and the scalar components (verl aggregates reward extra info per key); ``gated`` is 1.0
    when a gate shut the score to 0 (no calls where calls were expected, a forbidden tool, ...)."""
    return {
        "score": b.reward,
        "r_traj": b.r_traj,
        "r_state": b.r_state,
        "r_response": b.r_response,
        "r_answer": b.r_answer,
        "p_length": b.p_length,
        "p_format": b.p_format,
        "gated": float(b.gate is not None),
        "matched_calls": float(b.matched_calls),
        "expected_calls": float(b.expected_calls),
        "predicted_calls": float(b.predicted_calls),
        "unknown_tools": float(b.unknown_tools),
        "bad_arguments": float(b.bad_arguments),
        "tool_errors": float(b.tool_errors),
        "malformed": float(b.malformed),
    }


def _start() -> Any:
    global _portal, _portal_cm, _runtime, _runtime_cm
    with _lock:
        if _portal is None:
            from anyio.from_thread import start_blocking_portal

            from envreg.runtime import Runtime

            _portal_cm = start_blocking_portal()
            _portal = _portal_cm.__enter__()
            _runtime_cm = _portal.wrap_async_context_manager(Runtime())
            _runtime = _runtime_cm.__enter__()
            atexit.register(shutdown)
        return _portal


def _scorer(portal: Any, isolation: str, envs: dict[str, str]) -> Scorer:
    key = isolation + repr(sorted(envs.items()))
    with _lock:
        if key not in _scorers:
            _scorers[key] = Scorer(_runtime, isolation=isolation, sources=envs)
        return _scorers[key]


def shutdown() -> None:
    """Close the process's runtime and its sandboxes (registered with atexit)."""
    global _portal, _portal_cm, _runtime, _runtime_cm
    with _lock:
        if _portal is None:
            return
        try:
            _runtime_cm.__exit__(None, None, None)
        finally:
            _portal_cm.__exit__(None, None, None)
            _portal = _portal_cm = _runtime = _runtime_cm = None
            _scorers.clear()
