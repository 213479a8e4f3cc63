"""Reward-tie diagnostics and the uniform-group test (spec 1.5; metric names of spec 8).

A group's rewards are sorted and bucketed: a value joins the current bucket when it is within 1e-6 of
the bucket's first (anchor) value. A group with a single bucket is *uniform*: every completion gets
the same advantage (0 under GRPO/MaxRL), so the run loop skips it unless batch normalisation is on.
Groups of fewer than two completions are ineligible for the tie rates.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

TIE_TOLERANCE = 1e-6


def reward_buckets(rewards_G: Sequence[float], tol: float = TIE_TOLERANCE) -> list[int]:
    """Sizes of the tie buckets of one group."""
    sizes: list[int] = []
    anchor = None
    for r in sorted(float(x) for x in rewards_G):
        if anchor is None or abs(r - anchor) > tol:
            anchor = r
            sizes.append(1)
        else:
            sizes[-1] += 1
    return sizes


def is_uniform_group(rewards_G: Sequence[float]) -> bool:
    """True when all rewards of the group tie (a single bucket; an empty group is not uniform)."""
    return len(reward_buckets(rewards_G)) == 1


@dataclass(frozen=True)
class TieStats:
    """Tie statistics over a step's groups: `metrics` (spec 8 names) and per-group `uniform_G` flags."""

    metrics: dict[str, float] = field(default_factory=dict)
    uniform_G: list[bool] = field(default_factory=list)


def reward_tie_stats(groups: Sequence[Sequence[float]]) -> TieStats:
    """Tie and uniformity metrics for a list of reward groups."""
    eligible = tie_groups = uniform_groups = 0
    tied_pairs = total_pairs = 0
    unique_fractions: list[float] = []
    uniform_G: list[bool] = []
    for rewards_G in groups:
        sizes = reward_buckets(rewards_G)
        uniform_G.append(len(sizes) == 1)
        n = len(rewards_G)
        if n < 2:
            continue
        eligible += 1
        pairs = sum(s * (s - 1) // 2 for s in sizes)
        tied_pairs += pairs
        total_pairs += n * (n - 1) // 2
        tie_groups += pairs > 0
        uniform_groups += len(sizes) == 1
        unique_fractions.append(len(sizes) / n)
    metrics = {
        "reward_tie_eligible_groups": float(eligible),
        "reward_tie_groups": float(tie_groups),
        "reward_uniform_groups": float(uniform_groups),
        "reward_tie_group_rate": tie_groups / eligible if eligible else 0.0,
        "reward_uniform_group_rate": uniform_groups / eligible if eligible else 0.0,
        "reward_tie_pair_rate": tied_pairs / total_pairs if total_pairs else 0.0,
        "reward_unique_fraction_mean": sum(unique_fractions) / len(unique_fractions) if unique_fractions else 0.0,
    }
    return TieStats(metrics=metrics, uniform_G=uniform_G)
