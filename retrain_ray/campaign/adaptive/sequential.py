"""The group-sequential alternative to `policy.decide`'s Bonferroni split: a permutation test over all
looks and all pairs, AdaStop's design (Mathieu et al., TMLR 2024). Pure: no Ray, no I/O.

**Design.** The looks of a campaign re-measure the SAME seeds later in training, so their statistics are
strongly correlated; the Bonferroni split (and any union bound) ignores that and tests each look at a
sliver of `alpha`. Here the correlation is taken from the data: the condition labels of whole seed
trajectories (a seed's values at every rung so far) are permuted, and for every relabelling the
statistic (the range of the condition means, i.e. the largest pair difference) is taken at every look.
`alpha` is split as the Bonferroni split would between the rungs and the re-looks after seeds are
added (each re-look `alpha / looks`, `relook_level`), and the rungs' share is spent over the rungs by a
Lan-DeMets function of the rung's index among the rungs (`spent_alpha`, `look_levels`: cumulative
spending at rung k is the sum of the levels up to it). Every look measures the same seeds, so the
information does not grow with the step; what grows is the compute a stop saves, most at the first rung,
so the default ("early", `alpha * (k / rungs) ** 0.25`) spends most there: 56% of the rungs' share at the
first of 10 rungs, 76% at the first of 3, where Pocock's type spends 16% and 42%. Look k's boundary
is the lowest value such that the share of relabellings that cross *some* boundary up to look k is at
most the alpha spent by look k (campaign/adaptive/permutation.py). When looks are correlated the
relabellings that cross at look k already crossed earlier, so look k's boundary is near the quantile
at the *cumulative* alpha, not at the look's increment. A condition is stopped when its difference
from the leader at this look exceeds the boundary; the test then steps down (closed testing): the
rejected conditions leave the set, the relabellings are redrawn among the remaining conditions' seeds
only, the boundaries recomputed, until nothing more is rejected. The decision rules otherwise are
`policy.decide`'s (stop the significantly worse, add a seed to the undecided leader and runner-up at
the last rung).

**Guarantee.** Under the hypothesis that a set of conditions are exchangeable (the same distribution of
seed trajectories), every relabelling of their seeds is equally likely, so the chance that the observed
labelling crosses a boundary at any look is at most `alpha`; with the step-down this holds for every
pair at once (family-wise over all looks and all pairs, whichever `family`). It is exact with no
correlation estimate; with few seeds all splits are enumerated, otherwise `permutations` seeded random
ones (the observed one included, which keeps the test exact). Without `earlier_values` (no trajectories)
a look is tested alone at its own share (`look_levels`), the union bound, still valid; so is each
re-look of the last rung after seeds were added (the added seeds change the data, and which seeds are
added depends on the earlier looks, so they are not folded into the joint boundary).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from statistics import NormalDist
from typing import Literal

import numpy as np

from retrain_ray.campaign.adaptive import permutation, policy
from retrain_ray.campaign.adaptive.policy import RungDecision
from retrain_ray.campaign.adaptive.policy import _seeds_to_add as seeds_to_add  # pyright: ignore[reportPrivateUsage]
from retrain_ray.results.significance import Family, PairComparison, Verdict, leader_of, welch

Spending = Literal["early", "pocock", "obrien-fleming"]
EARLY_RHO = 0.25   # "early" spending: alpha * fraction ** EARLY_RHO
TEST_NAME = "sequential-permutation"
_TIE = 1e-9   # relative: an observed gap within rounding of a relabelling's statistic ties with it


def spent_alpha(fraction: float, alpha: float, spending: Spending = "early") -> float:
    """The alpha spent by the fraction `fraction` in [0, 1] of the looks (Lan-DeMets 1983): "early" is the
    power family `alpha * fraction ** (1/4)` (Kim-DeMets with rho = 1/4, front-loaded), "pocock" the
    Pocock-type `alpha * ln(1 + (e - 1) fraction)`, "obrien-fleming" the O'Brien-Fleming-type."""
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"fraction={fraction}: expected 0 <= fraction <= 1")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha={alpha}: expected 0 < alpha < 1")
    if fraction == 0.0:
        return 0.0
    if spending == "early":
        return alpha * fraction ** EARLY_RHO
    if spending == "pocock":
        return alpha * math.log(1.0 + (math.e - 1.0) * fraction)
    z = NormalDist().inv_cdf(1.0 - alpha / 2.0)
    return 2.0 - 2.0 * NormalDist().cdf(z / math.sqrt(fraction))


def relook_level(rungs: Sequence[int], min_seeds: int, max_seeds: int, alpha: float) -> float:
    """The level of each re-look of the last rung after seeds were added: `alpha / planned looks`, the
    Bonferroni split's level (a re-look is tested alone, so it gets no less than there)."""
    return alpha / policy.planned_looks(len(rungs), min_seeds, max_seeds)


def look_levels(rungs: Sequence[int], min_seeds: int, max_seeds: int, alpha: float,
                spending: Spending = "early") -> dict[int, float]:
    """The alpha each rung's first look adds to the spending plan: the rungs' share of `alpha` (all but
    the re-looks' `relook_level` each) spent over the rung's index among the rungs (k / rungs, not its
    step: every look measures the same seeds, so the information does not grow with the step). The
    levels of all the looks a campaign may make, re-looks included, sum to `alpha` (up to rounding)."""
    looks = policy.planned_looks(len(rungs), min_seeds, max_seeds)   # validates the seeds too
    steps = sorted(rungs)
    if len(set(steps)) != len(steps) or steps[0] <= 0:
        raise ValueError(f"rungs={list(rungs)}: expected distinct positive steps")
    rungs_alpha = alpha * len(steps) / looks
    levels: dict[int, float] = {}
    spent = 0.0
    for k, step in enumerate(steps, start=1):
        total = spent_alpha(k / len(steps), rungs_alpha, spending)
        levels[step] = total - spent
        spent = total
    return levels


def cumulative_budgets(step: int, rungs: Sequence[int], min_seeds: int, max_seeds: int, alpha: float,
                       spending: Spending = "early") -> list[float]:
    """The alpha spent by each rung up to `step` (cumulative, the last one at this look): the sum of
    `look_levels` up to the rung."""
    levels = look_levels(rungs, min_seeds, max_seeds, alpha, spending)
    if step not in levels:
        raise ValueError(f"step={step} is not a rung of {list(rungs)}")
    budgets = list(np.cumsum([levels[s] for s in sorted(rungs) if s <= step]))
    return [min(float(b), alpha) for b in budgets]


def decide(step: int, values_by_condition: Mapping[str, Sequence[float]], *,
           seeds_by_condition: Mapping[str, int], mode: Literal["max", "min"], alpha: float, max_seeds: int,
           last_rung: bool, can_add_seeds: bool, rungs: Sequence[int], min_seeds: int,
           family: Family = "all-pairs", spending: Spending = "early",
           earlier_values: Mapping[str, Sequence[Sequence[float]]] | None = None, relook: int = 0,
           permutations: int = 2000, seed: int = 0) -> RungDecision:
    """The group-sequential decision at a look: `policy.decide`'s inputs and `RungDecision` (its
    `alpha_per_look` is the share of relabellings beyond this look's boundary, the level this look
    tested at), plus the campaign's `rungs` and `min_seeds` (the spending plan), and:

    `earlier_values[c][s]`: seed `s` of condition `c` (the order of `values_by_condition[c]`) at the
    rungs before `step`, in rung order (omit it: this look is tested alone at its own share);
    `relook`: 0 at a rung's first look, n at the n-th re-look of the last rung after seeds were added
    (a re-look is tested alone at its share of the last rung's alpha);
    `permutations`, `seed`: the relabellings drawn when there are more than `permutations` splits.
    `family` is accepted for `policy.decide`'s signature: the test covers all pairs either way."""
    del family
    budgets = _budgets(step, rungs, min_seeds, max_seeds, alpha, spending, relook, earlier_values)
    trajectories = _trajectories(values_by_condition, earlier_values, len(budgets))
    leader = leader_of({c: [t[-1] for t in ts] for c, ts in trajectories.items()}, mode)
    if leader is None:
        return RungDecision(step, None, (), (), (), 0.0)
    worse, p_values, level = _step_down(trajectories, leader, budgets, permutations, seed)
    comparisons = tuple(_comparison(c, leader, trajectories, p_values.get(c, 1.0), c in worse)
                        for c in trajectories if c != leader)
    stop = tuple(c for c in comparisons if c.verdict == "worse")
    add: tuple[str, ...] = ()
    if last_rung and can_add_seeds:
        add = seeds_to_add(leader, comparisons, seeds_by_condition, max_seeds, mode)
    return RungDecision(step, leader, stop, add, comparisons, level)


def _budgets(step: int, rungs: Sequence[int], min_seeds: int, max_seeds: int, alpha: float, spending: Spending,
             relook: int, earlier_values: Mapping[str, Sequence[Sequence[float]]] | None) -> list[float]:
    """The cumulative budgets of the looks tested jointly: all rungs up to `step` with trajectories;
    only this look's own share without them; a re-look's `relook_level` (the added seeds change the data
    the earlier looks were tested on, so a re-look is its own test at its own share: the union bound)."""
    if step not in rungs:
        raise ValueError(f"step={step} is not a rung of {list(rungs)}")
    if relook > 0:
        return [relook_level(rungs, min_seeds, max_seeds, alpha)]
    if earlier_values is None:
        return [look_levels(rungs, min_seeds, max_seeds, alpha, spending)[step]]
    return cumulative_budgets(step, rungs, min_seeds, max_seeds, alpha, spending)


def _trajectories(values_by_condition: Mapping[str, Sequence[float]],
                  earlier_values: Mapping[str, Sequence[Sequence[float]]] | None,
                  looks: int) -> dict[str, list[list[float]]]:
    """Each condition's seeds with every look's value (the finite ones), leaving out conditions with
    fewer than 2 such seeds (untestable, as in `policy.decide`)."""
    out: dict[str, list[list[float]]] = {}
    for cond, values in values_by_condition.items():
        no_seeds: Sequence[Sequence[float]] = ()
        earlier = earlier_values.get(cond, no_seeds) if earlier_values is not None else no_seeds
        seeds: list[list[float]] = []
        for s, value in enumerate(values):
            before: Sequence[float] = earlier[s] if s < len(earlier) else ()
            trajectory = [*before, value][-looks:]
            if len(trajectory) == looks and all(math.isfinite(v) for v in trajectory):
                seeds.append([float(v) for v in trajectory])
        if seeds:
            out[cond] = seeds
    return out


def _step_down(trajectories: Mapping[str, list[list[float]]], leader: str, budgets: Sequence[float],
               permutations: int, seed: int) -> tuple[set[str], dict[str, float], float]:
    """The conditions rejected as different from the leader (step-down over the conditions still in the
    set), each compared condition's permutation p-value at this look, and the last pass's level."""
    testable = [c for c, ts in trajectories.items() if len(ts) >= 2]
    active = list(testable) if leader in testable else []
    rejected: set[str] = set()
    p_values: dict[str, float] = {}
    level = 0.0
    while len(active) >= 2:
        sizes = [len(trajectories[c]) for c in active]
        values = np.array([t for c in active for t in trajectories[c]], dtype=np.float64)
        rows = permutation.relabellings(sizes, permutations, seed)
        statistics = permutation.studentized_range(values, sizes, rows)
        bound = permutation.boundaries(statistics, budgets)[-1]
        now = statistics[:, -1]
        level = float(np.mean(now > bound))
        spread = _pooled_spread(values[:, -1], sizes)
        means = {c: float(np.mean([t[-1] for t in trajectories[c]])) for c in active}
        new: set[str] = set()
        for cond in active:
            if cond == leader:
                continue
            gap = _studentized(abs(means[cond] - means[leader]), spread)
            p_values.setdefault(cond, float(np.mean(now >= gap - _TIE * max(1.0, gap))))
            if gap > bound + _TIE * max(1.0, abs(bound)):   # the observed split may sit on the boundary
                new.add(cond)
        if not new:
            break
        rejected |= new
        active = [c for c in active if c not in new]
    return rejected, p_values, level


def _pooled_spread(values: np.ndarray[tuple[int], np.dtype[np.float64]], sizes: Sequence[int]) -> float:
    """The pooled within-condition standard deviation of one look's values (grouped by `sizes`); 0 gives
    +inf gaps below, as in `permutation.studentized_range`."""
    squares = 0.0
    start = 0
    for size in sizes:
        group = values[start:start + size]
        squares += float(np.sum((group - group.mean()) ** 2))
        start += size
    return math.sqrt(squares / (len(values) - len(sizes)))


def _studentized(gap: float, spread: float) -> float:
    if spread > 0.0:
        return gap / spread
    return math.inf if gap > 0.0 else 0.0


def _comparison(cond: str, leader: str, trajectories: Mapping[str, list[list[float]]], p_value: float,
                rejected: bool) -> PairComparison:
    """`cond` against the leader at this look: Welch's difference and 95% CI for the reader, the
    permutation p-value and verdict for the decision."""
    mine = [t[-1] for t in trajectories[cond]]
    theirs = [t[-1] for t in trajectories[leader]]
    if len(mine) < 2 or len(theirs) < 2:
        diff = float(np.mean(mine)) - float(np.mean(theirs))
        return PairComparison(cond, leader, diff, -math.inf, math.inf, 1.0, "undecided", len(mine), len(theirs),
                              test=TEST_NAME)
    test = welch(mine, theirs)
    verdict: Verdict = "worse" if rejected and test.diff != 0.0 else "undecided"
    return PairComparison(cond, leader, test.diff, test.ci_low, test.ci_high, p_value, verdict, len(mine),
                          len(theirs), test=TEST_NAME, raw_p_value=p_value, t=test.t, df=test.df)
