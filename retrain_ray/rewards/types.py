"""Contract of a reward: score a batch of completions against their references.

Rewards are built once per run (`build_reward`) and called with whole batches so an implementation
can amortise work (cached reference parses, one event loop for async custom scorers, one worker
process for math verification off the main thread).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

CORRECT_THRESHOLD = 0.5
"""A completion counts as correct when its reward is strictly greater than this (spec 1.5 / 9)."""


@runtime_checkable
class Reward(Protocol):
    """Scores completions; `score_batch` returns one float per (completion, reference) pair."""

    name: str

    def score_batch(self, completions: list[str], references: list[str]) -> list[float]: ...


def check_batch(completions: list[str], references: list[str]) -> None:
    """Raise a clear error when the two lists do not pair up."""
    if len(completions) != len(references):
        raise ValueError(
            f"score_batch got {len(completions)} completions but {len(references)} references; "
            "pass one reference per completion (repeat a prompt's reference for each of its samples)"
        )


def is_correct(reward: float) -> bool:
    """The original's correctness rule: reward > CORRECT_THRESHOLD."""
    return reward > CORRECT_THRESHOLD
