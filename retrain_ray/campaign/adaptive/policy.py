"""What an adaptive campaign does at a rung: stop the conditions that have clearly lost, add seeds where
the comparison that matters is undecided. Pure: no Ray, no I/O; the Tune scheduler calls `decide`.

At each rung the conditions still running are compared on the seeds that reached it
(`significance.compare_to_leader`: Welch's t on seed values, Holm over all pairs). A condition
significantly worse than the leader is stopped. At the last rung, when the leader and the runner-up
(the best other condition) are undecided, each gets one more seed (while below `max_seeds` and while the
caller allows it), and the last rung is looked at again when those seeds reach it.

**Error rate across rungs.** Every look (each rung, and each re-look at the last rung after seeds were
added) is a chance to stop the truly best condition by bad luck. `alpha` is the family-wise rate for the
whole campaign; each look tests at `alpha / looks` (Bonferroni over looks, Holm within a look), with
`looks = planned_looks(...)`: the rungs plus one re-look per seed-adding round. By the union bound the
chance of any false verdict in the campaign (a wrongly stopped condition or a wrongly declared winner)
is at most `alpha`, whatever the correlation between rungs (the same seeds are looked at again, so the
looks are strongly and positively correlated, and the bound is conservative). A group-sequential
boundary (Pocock, O'Brien-Fleming) would spend less, but it needs the correlation between looks, which
here depends on how persistent a seed's luck is along training: unknown, and not estimable from 2-5 seeds.
The caller keeps the number of seed-adding rounds within `max_seeds - min_seeds` (`can_add_seeds=False`
after that), so the looks stay within the plan.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from retrain_ray.results.significance import Family, PairComparison, compare_to_leader


@dataclass(frozen=True)
class RungDecision:
    """The decision at one rung (frozen, picklable): the conditions to stop, those that get a seed more,
    and every comparison with the leader behind it. `alpha_per_look` is the level each test used."""

    step: int
    leader: str | None
    stop: tuple[PairComparison, ...]
    add_seed_to: tuple[str, ...]
    comparisons: tuple[PairComparison, ...]
    alpha_per_look: float = 0.05

    @property
    def decided(self) -> bool:
        """True when every other condition is significantly worse than the leader (a winner is declared)."""
        return self.leader is not None and all(c.verdict == "worse" for c in self.comparisons)


def planned_looks(rungs: int, min_seeds: int, max_seeds: int) -> int:
    """How many times a campaign may test: once per rung, plus one re-look at the last rung per
    seed-adding round (at most `max_seeds - min_seeds` rounds). Pass it to `decide` as `looks`."""
    if rungs < 1:
        raise ValueError(f"rungs={rungs}: an adaptive campaign needs at least one rung")
    if not 1 <= min_seeds <= max_seeds:
        raise ValueError(f"min_seeds={min_seeds}, max_seeds={max_seeds}: expected 1 <= min_seeds <= max_seeds")
    return rungs + (max_seeds - min_seeds)


def decide(step: int, values_by_condition: Mapping[str, Sequence[float]], *,
           seeds_by_condition: Mapping[str, int], mode: Literal["max", "min"], alpha: float, max_seeds: int,
           last_rung: bool, can_add_seeds: bool, looks: int = 1, family: Family = "all-pairs") -> RungDecision:
    """At a rung: stop every condition significantly worse than the leader; at the last rung, when the
    leader and the runner-up are undecided, add one seed to each (while below max_seeds and can_add_seeds).

    `values_by_condition`: the metric of each seed of each still-running condition that reached `step`
    (stopped conditions are left out). `seeds_by_condition`: how many seeds each condition has started
    (reached or not). `alpha` is the campaign's family-wise rate; this look tests at `alpha / looks`."""
    if looks < 1:
        raise ValueError(f"looks={looks}: expected at least 1 (see planned_looks)")
    alpha_per_look = alpha / looks
    leader, comparisons = compare_to_leader(values_by_condition, mode=mode, alpha=alpha_per_look, family=family)
    stop = tuple(c for c in comparisons if c.verdict == "worse")
    add: tuple[str, ...] = ()
    if last_rung and can_add_seeds and leader is not None:
        add = _seeds_to_add(leader, comparisons, seeds_by_condition, max_seeds, mode)
    return RungDecision(step, leader, stop, add, comparisons, alpha_per_look)


def _seeds_to_add(leader: str, comparisons: tuple[PairComparison, ...], seeds_by_condition: Mapping[str, int],
                  max_seeds: int, mode: Literal["max", "min"]) -> tuple[str, ...]:
    """The leader and the runner-up (the undecided condition closest to it), each while below max_seeds;
    nothing when no other condition is undecided."""
    undecided = [c for c in comparisons if c.verdict == "undecided"]
    if not undecided:
        return ()
    sign = 1.0 if mode == "max" else -1.0
    runner_up = max(undecided, key=lambda c: sign * c.diff if c.diff == c.diff else -float("inf"))
    return tuple(c for c in (leader, runner_up.condition) if seeds_by_condition.get(c, 0) < max_seeds)
