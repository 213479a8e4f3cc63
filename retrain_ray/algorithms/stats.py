"""Uncertainty statistics of a group, split into execution (mask 0) and planning (mask 1) tokens.

Population variance; values are capped at 50 inside the statistics (spec 2.4). Empty subsets give
mean 0, variance 0, count 0.
"""

from __future__ import annotations

from collections.abc import Sequence

from retrain_ray.algorithms.types import MAX_SURPRISAL, EntropyStats, SplitStats


def split_stats(values: Sequence[float]) -> SplitStats:
    """Mean, population variance and count of `values` (each capped at 50)."""
    if not values:
        return SplitStats()
    capped = [min(float(v), MAX_SURPRISAL) for v in values]
    mean = sum(capped) / len(capped)
    var = sum((v - mean) ** 2 for v in capped) / len(capped)
    return SplitStats(mean=mean, var=var, count=len(capped))


class SplitCollector:
    """Accumulates per-token values of a group into execution and planning lists."""

    def __init__(self) -> None:
        self.exec_values: list[float] = []
        self.plan_values: list[float] = []

    def add(self, values_T: Sequence[float], mask_T: Sequence[int]) -> None:
        for v, m in zip(values_T, mask_T, strict=True):
            (self.plan_values if m else self.exec_values).append(float(v))

    def exec_stats(self) -> SplitStats:
        return split_stats(self.exec_values)

    def plan_stats(self) -> SplitStats:
        return split_stats(self.plan_values)


def entropy_stats(pre: SplitCollector, post: SplitCollector) -> EntropyStats:
    """Combine the pre- and post-transform collectors into one `EntropyStats`."""
    return EntropyStats(
        exec_pre=pre.exec_stats(), plan_pre=pre.plan_stats(), exec_post=post.exec_stats(), plan_post=post.plan_stats()
    )
