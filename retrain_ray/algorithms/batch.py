"""Trainer-side batch transforms applied after all groups (spec 2.8), in this order:

1. `batch_normalize` (REINFORCE++, `[training].batch_advantage_norm`): over every nonzero token
   advantage of the batch, a -> (a - mean) / (std + 1e-8) with the population std; zeros (prompt
   padding, masked tokens) stay 0. With std < 1e-8 values are only centred.
2. `cap_advantages` (`[training].adv_clip_max > 0`): clamp nonzero values to [-cap, cap].
Both return `(new_advantages_D, metrics)` and never modify their input.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import cast

NORM_EPS = 1e-8


def batch_normalize(advantages_D: Sequence[Sequence[float]]) -> tuple[list[list[float]], dict[str, float]]:
    """Standardise nonzero advantages over the batch; metrics `batch_adv_count/mean/std` (pre-norm)."""
    values = [float(a) for row in advantages_D for a in row if a != 0.0]
    rows = [[float(a) for a in row] for row in advantages_D]
    if not values:
        return rows, {"batch_adv_count": 0.0, "batch_adv_mean": 0.0, "batch_adv_std": 0.0}
    mean = sum(values) / len(values)
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
    metrics = {"batch_adv_count": float(len(values)), "batch_adv_mean": mean, "batch_adv_std": std}
    if std < NORM_EPS:
        return [[a - mean if a != 0.0 else 0.0 for a in row] for row in rows], metrics
    return [[(a - mean) / (std + NORM_EPS) if a != 0.0 else 0.0 for a in row] for row in rows], metrics


def cap_advantages(
    advantages_D: Sequence[Sequence[float]], cap: float
) -> tuple[list[list[float]], dict[str, float]]:
    """Clamp nonzero advantages to [-cap, cap].

    Metrics: `adv_cap_fraction` = capped / nonzero, `adv_cap_magnitude` = mean |a| of the capped values
    before capping (0 when nothing was capped).
    """
    if not cap > 0:
        raise ValueError(f"cap_advantages: cap must be > 0 (got {cap}); set [training].adv_clip_max > 0 or skip the cap.")
    rows: list[list[float]] = []
    nonzero = 0
    capped: list[float] = []
    for row in advantages_D:
        out: list[float] = []
        for a in row:
            a = float(a)
            if a != 0.0:
                nonzero += 1
                if abs(a) > cap:
                    capped.append(abs(a))
                    a = math.copysign(cap, a)
            out.append(a)
        rows.append(out)
    return rows, {
        "adv_cap_fraction": len(capped) / nonzero if nonzero else 0.0,
        "adv_cap_magnitude": sum(capped) / len(capped) if capped else 0.0,
    }


# Episode-level (one scalar per completion) advantage modes (spec 2.2).
#
# * `grpo`: A_i = r_i - mean(r). Like Dr. GRPO there is no division by the group's std.
# * `reinforce_pp`: identical to `grpo` inside a group; the REINFORCE++ batch normalisation is a separate,
#   trainer-side step (`batch.batch_normalize`, enabled by `[training].batch_advantage_norm`).
# * `maxrl`: A_i = (r_i - m) / (m + eps) with m = mean(r), and all zeros when m <= eps (eps = 1e-6 unless
#   `advantage_params.eps` is given): rarely solved prompts get large advantages.
MAXRL_EPS = 1e-6


def grpo(rewards_G: Sequence[float], params: Mapping[str, object] | None = None) -> list[float]:
    """Group-centred rewards."""
    if not rewards_G:
        return []
    mean = sum(rewards_G) / len(rewards_G)
    return [float(r) - mean for r in rewards_G]


def reinforce_pp(rewards_G: Sequence[float], params: Mapping[str, object] | None = None) -> list[float]:
    """REINFORCE++ at group level: the same as GRPO (its batch step lives in `batch.py`)."""
    return grpo(rewards_G, params)


def maxrl(rewards_G: Sequence[float], params: Mapping[str, object] | None = None) -> list[float]:
    """Centred rewards divided by the group mean; zeros for a group whose mean is <= eps."""
    if not rewards_G:
        return []
    eps = float(cast("float", (params or {}).get("eps", MAXRL_EPS)))
    mean = sum(rewards_G) / len(rewards_G)
    if mean <= eps:
        return [0.0] * len(rewards_G)
    return [(float(r) - mean) / (mean + eps) for r in rewards_G]


# Reward-tie diagnostics and the uniform-group test (spec 1.5; metric names of spec 8).
#
# A group's rewards are sorted and bucketed: a value joins the current bucket when it is within 1e-6 of
# the bucket's first (anchor) value. A group with a single bucket is *uniform*: every completion gets
# the same advantage (0 under GRPO/MaxRL), so the run loop skips it unless batch normalisation is on.
# Groups of fewer than two completions are ineligible for the tie rates.
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
