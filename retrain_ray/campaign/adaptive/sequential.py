"""The group-sequential alternative to `policy.decide`'s Bonferroni split: the campaign's family-wise
`alpha` is spent over the looks by a Lan-DeMets spending function of the information fraction (the
rung's step over the last rung's), instead of `alpha / looks` at every look. Pure: no Ray, no I/O.

**Design.** Rung `k` (step `s_k`, last rung step `S`) may spend `f(s_k / S) - f(s_{k-1} / S)` of
`alpha`, where `f` is the spending function (`f(0) = 0`, `f(1) = alpha`). The last rung's share is
split evenly between its first look and the re-looks after seeds were added (at most
`max_seeds - min_seeds`). Each look tests every pair with Welch's t and Holm at its share
(`policy.decide` at that level), so the decision rules (stop the significantly worse, add a seed to
the undecided leader and runner-up at the last rung) are `policy.decide`'s exactly.

**Guarantee.** The shares of all looks sum to at most `alpha`; by the union bound over looks (and
Holm over the pairs within a look), the chance that the campaign ever stops the truly best condition,
or declares any false difference, is at most `alpha`, whatever the correlation between rungs. The
boundaries do not assume the independent increments the classical Pocock/O'Brien-Fleming constants
need: here a look re-measures the same seeds later in training, and how persistent a seed's luck is
(the correlation between looks) is unknown and not estimable from 2-5 seeds. What the spending
function changes is *where* alpha goes: `"pocock"` (Lan-DeMets' Pocock-type,
`alpha * ln(1 + (e - 1) t)`) spends more early, where stopping a clearly worse condition saves the most
steps; `"obrien-fleming"` (`2 - 2 Phi(z_{1-alpha/2} / sqrt(t))`) keeps almost everything for the last
rung. docs/campaigns.md ("Statistics") argues the choice; campaign/adaptive/sequential_simulation.py
measures it against the Bonferroni split.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from statistics import NormalDist
from typing import Literal

from retrain_ray.campaign.adaptive import policy
from retrain_ray.campaign.adaptive.policy import RungDecision
from retrain_ray.results.significance import Family

Spending = Literal["pocock", "obrien-fleming"]


def spent_alpha(fraction: float, alpha: float, spending: Spending = "pocock") -> float:
    """The family-wise alpha spent by information fraction `fraction` in [0, 1] (Lan-DeMets 1983)."""
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"fraction={fraction}: expected 0 <= fraction <= 1")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha={alpha}: expected 0 < alpha < 1")
    if fraction == 0.0:
        return 0.0
    if spending == "pocock":
        return alpha * math.log(1.0 + (math.e - 1.0) * fraction)
    z = NormalDist().inv_cdf(1.0 - alpha / 2.0)
    return 2.0 - 2.0 * NormalDist().cdf(z / math.sqrt(fraction))


def look_levels(rungs: Sequence[int], min_seeds: int, max_seeds: int, alpha: float,
                spending: Spending = "pocock") -> dict[int, float]:
    """The level each look at a rung's step tests at: the rung's spent share, the last rung's share
    divided between its first look and the `max_seeds - min_seeds` re-looks. The levels of all the
    looks a campaign may make sum to `alpha` (up to rounding)."""
    looks = policy.planned_looks(len(rungs), min_seeds, max_seeds)   # validates the seeds too
    steps = sorted(rungs)
    if len(set(steps)) != len(steps) or steps[0] <= 0:
        raise ValueError(f"rungs={list(rungs)}: expected distinct positive steps")
    last_looks = 1 + looks - len(steps)
    levels: dict[int, float] = {}
    spent = 0.0
    for step in steps:
        total = spent_alpha(step / steps[-1], alpha, spending)
        share = total - spent
        spent = total
        levels[step] = share / last_looks if step == steps[-1] else share
    return levels


def decide(step: int, values_by_condition: Mapping[str, Sequence[float]], *,
           seeds_by_condition: Mapping[str, int], mode: Literal["max", "min"], alpha: float, max_seeds: int,
           last_rung: bool, can_add_seeds: bool, rungs: Sequence[int], min_seeds: int,
           family: Family = "all-pairs", spending: Spending = "pocock") -> RungDecision:
    """`policy.decide` at this look's level from `look_levels` instead of `alpha / looks`: the same
    inputs (plus the campaign's `rungs` and `min_seeds`, which fix the spending plan) and the same
    `RungDecision` (its `alpha_per_look` is the level used)."""
    if step not in rungs:
        raise ValueError(f"step={step} is not a rung of {list(rungs)}")
    level = look_levels(rungs, min_seeds, max_seeds, alpha, spending)[step]
    return policy.decide(step, values_by_condition, seeds_by_condition=seeds_by_condition, mode=mode,
                         alpha=level, max_seeds=max_seeds, last_rung=last_rung, can_add_seeds=can_add_seeds,
                         looks=1, family=family)
