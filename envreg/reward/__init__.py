"""Reward evaluation: replay predicted calls in sandboxes seeded from a record, score against the oracle."""

from envreg.reward.parse import ParsedOutput, PredictedCall, parse_output
from envreg.reward.score import RewardBreakdown, ScoreOptions, Scorer, score_one
from envreg.reward.truth import GroundTruth, read_truth

__all__ = [
    "GroundTruth",
    "ParsedOutput",
    "PredictedCall",
    "RewardBreakdown",
    "ScoreOptions",
    "Scorer",
    "parse_output",
    "read_truth",
    "score_one",
]
