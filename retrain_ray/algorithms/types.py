"""Contract of the advantage pipeline: its inputs (contexts for plugins) and its outputs.

Shapes use suffixes: `_G` one value per completion of a prompt group, `_G_T` one list of per-token
values per completion. Everything here is a plain frozen dataclass and picklable, so results can be
sent between Ray actors. `split_stats` / `entropy_stats` / `SplitCollector` compute the uncertainty
statistics of a group, split into execution (mask 0) and planning (mask 1) tokens: population variance,
values capped at 50 inside the statistics (spec 2.4); empty subsets give mean 0, variance 0, count 0.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import cast

MAX_SURPRISAL = 50.0
"""Cap applied to every surprisal / entropy value (spec 2, `advantages/constants.py`)."""


@dataclass(frozen=True)
class SplitStats:
    """Mean, population variance and count of one token subset."""

    mean: float = 0.0
    var: float = 0.0
    count: int = 0


@dataclass(frozen=True)
class EntropyStats:
    """Uncertainty statistics of one group, split by planning mask, before and after the transform."""

    exec_pre: SplitStats = SplitStats()
    plan_pre: SplitStats = SplitStats()
    exec_post: SplitStats = SplitStats()
    plan_post: SplitStats = SplitStats()

    def as_metrics(self) -> dict[str, float]:
        """Metric names as spec section 8 (`exec_surprisal_mean`, `post_plan_surprisal_var`, ...)."""
        out: dict[str, float] = {}
        for prefix, pre, post in (("exec", self.exec_pre, self.exec_post), ("plan", self.plan_pre, self.plan_post)):
            out[f"{prefix}_surprisal_mean"] = pre.mean
            out[f"{prefix}_surprisal_var"] = pre.var
            out[f"post_{prefix}_surprisal_mean"] = post.mean
            out[f"post_{prefix}_surprisal_var"] = post.var
        return out


@dataclass(frozen=True)
class GroupAdvantages:
    """Token advantages of one prompt group (same ragged shape as its logprobs)."""

    token_advantages: list[list[float]]
    stats: EntropyStats = EntropyStats()
    extra_metrics: dict[str, float] = field(default_factory=dict)
    has_stats: bool = True


@dataclass(frozen=True)
class AdvantageContext:
    """Input of an episode-level advantage plugin whose first parameter is named `ctx`."""

    rewards_G: list[float]
    params: Mapping[str, object]


@dataclass(frozen=True)
class UncertaintyInput:
    """Per-token data of one completion for an uncertainty kind (entropies/distributions may be absent)."""

    logprobs_T: Sequence[float]
    entropies_T: Sequence[float] | None = None
    distributions_T: Sequence[Sequence[float]] | None = None


@dataclass(frozen=True)
class TransformContext:
    """Input of a context-style token transform plugin (spec 2.4)."""

    advantages_G: list[float]
    logprobs_G_T: list[list[float]]
    planning_masks_G_T: list[list[int]]
    sepa_lambda: float
    params: Mapping[str, object]
    step: int
    gtpo_beta: float
    hicra_alpha: float
    entropies_G_T: list[list[float]] | None = None


@dataclass(frozen=True)
class AlgorithmContext:
    """Input of a full-algorithm plugin (spec 2.7)."""

    rewards_G: list[float]
    logprobs_G_T: list[list[float]]
    planning_masks_G_T: list[list[int]]
    params: Mapping[str, object]
    step: int
    sepa_lambda: float
    gtpo_beta: float
    hicra_alpha: float
    token_distributions_G: list[list[list[float]]] | None = None
    precomputed_entropies_G: list[list[float]] | None = None


def param_table(value: object) -> Mapping[str, object]:
    """A nested table of the params (`transform_params`, ...) as TOML gives it; no check, no copy."""
    return cast("Mapping[str, object]", value)


def param_number(value: object) -> float:
    """A numeric param as a float: exactly `float(value)`, which raises on what is not a number."""
    return float(cast("float", value))

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
