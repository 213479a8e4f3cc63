"""How many seeds a difference needs, from a pilot (Colas et al. 2018: pilot -> seed spread -> seeds).
Pure: no NumPy, no I/O.

The pilot gives each condition's per-seed scores (2+ seeds each). The **seed-to-seed spread** is the
pooled standard deviation `s` (each condition's sample variance weighted by its degrees of freedom,
so the spread of seeds around their own condition's mean, not the gap between conditions).

Seeds per condition to detect a difference `detect` (in the metric's units) with a two-sided test at
`alpha` with probability `power`, two conditions of `n` seeds each with the pilot's spread:

- `approximation="normal"`: `n = ceil(2 (z_{1-alpha/2} + z_{power})^2 s^2 / detect^2)`, the textbook
  normal approximation (known variance);
- `approximation="welch"` (the default): the same with Student t quantiles at Welch's degrees of freedom
  for equal n and equal spread, `df = 2 (n - 1)`, solved for the smallest `n` that satisfies it. The
  t quantiles account for the variance being estimated from the seeds, which matters at the 3-10 seeds
  a campaign runs (the normal form asks for about 1-2 seeds too few there); it is the test
  results/significance.py runs.

Both use the pilot's spread as if it were the truth; a 2-3 seed pilot estimates it loosely (the report
says how many seeds it rests on). Multiplicity (Holm over pairs, looks of an adaptive campaign) is not
included: pass the per-comparison alpha (e.g. alpha / pairs) for a conservative figure.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Literal

from retrain_ray.results.significance import t_quantile

Approximation = Literal["welch", "normal"]
MAX_SEEDS = 100_000


@dataclass(frozen=True)
class SeedSpread:
    """The pilot's seed-to-seed standard deviation: per condition, and pooled over `pilot_seeds` seeds."""

    by_condition: dict[str, float]
    pooled: float
    pilot_seeds: int
    degrees_of_freedom: int


@dataclass(frozen=True)
class SeedsNeeded:
    """Seeds per condition to detect `detect` at two-sided `alpha` with `power`, from the pilot's `spread`."""

    spread: SeedSpread
    detect: float
    alpha: float
    power: float
    approximation: Approximation
    seeds_per_condition: int

    def describe(self) -> str:
        """One line: `seed-to-seed sd 0.12 (pooled over 6 seeds); a difference of 0.05 needs 93 seeds per
        condition (two-sided alpha 0.05, power 0.8, welch)`."""
        return (f"seed-to-seed sd {self.spread.pooled:.4g} (pooled over {self.spread.pilot_seeds} seeds); "
                f"a difference of {self.detect:.4g} needs {self.seeds_per_condition} seeds per condition "
                f"(two-sided alpha {self.alpha:g}, power {self.power:g}, {self.approximation})")


def seed_spread(pilot: Mapping[str, Sequence[float]]) -> SeedSpread:
    """The per-condition and pooled seed-to-seed standard deviations; every condition needs 2+ finite seeds."""
    by_condition: dict[str, float] = {}
    squares = 0.0
    df = 0
    seeds = 0
    for condition, values in pilot.items():
        finite = [float(v) for v in values if math.isfinite(v)]
        if len(finite) < 2:
            raise ValueError(f"{condition}: {len(finite)} finite seed(s); the spread needs at least 2 per condition")
        mean = math.fsum(finite) / len(finite)
        ss = math.fsum((v - mean) ** 2 for v in finite)
        by_condition[condition] = math.sqrt(ss / (len(finite) - 1))
        squares += ss
        df += len(finite) - 1
        seeds += len(finite)
    if not by_condition:
        raise ValueError("the pilot has no conditions")
    return SeedSpread(by_condition, math.sqrt(squares / df), seeds, df)


def seeds_needed(pilot: Mapping[str, Sequence[float]], detect: float, *, alpha: float = 0.05,
                 power: float = 0.8, approximation: Approximation = "welch") -> SeedsNeeded:
    """Seeds per condition for a two-sided test at `alpha` to see a difference of `detect` with `power`."""
    if not detect > 0.0:
        raise ValueError(f"detect={detect}: expected a positive difference in the metric's units")
    if not 0.0 < alpha < 1.0 or not 0.0 < power < 1.0:
        raise ValueError(f"alpha={alpha}, power={power}: expected both strictly between 0 and 1")
    spread = seed_spread(pilot)
    effect = detect / spread.pooled if spread.pooled > 0.0 else math.inf
    if approximation == "normal":
        n = _normal_seeds(effect, alpha, power)
    else:
        n = _welch_seeds(effect, alpha, power)
    return SeedsNeeded(spread, detect, alpha, power, approximation, n)


def _normal_seeds(effect: float, alpha: float, power: float) -> int:
    z = NormalDist().inv_cdf(1.0 - alpha / 2.0) + NormalDist().inv_cdf(power)
    return max(2, math.ceil(2.0 * (z / effect) ** 2))


def _welch_seeds(effect: float, alpha: float, power: float) -> int:
    """The smallest n >= 2 with 2 (t_{1-alpha/2, df} + t_{power, df})^2 / effect^2 <= n, df = 2 (n - 1).
    t quantiles exceed the normal ones, so the search starts at the normal answer and steps up."""
    n = _normal_seeds(effect, alpha, power)
    while n < MAX_SEEDS:
        df = 2.0 * (n - 1)
        t = t_quantile(1.0 - alpha / 2.0, df) + t_quantile(power, df)
        if 2.0 * (t / effect) ** 2 <= n:
            return n
        n += 1
    raise ValueError(f"a difference of {effect:.3g} seed sd needs more than {MAX_SEEDS} seeds per condition")
