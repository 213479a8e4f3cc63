"""Simulated campaigns run through the adaptive decision code: how often it stops the truly best
condition, how many steps it spends against the full grid, and whether it names the grid's winner.

A campaign is drawn from known condition means and seed noise: the metric of seed s of condition c at
rung r is

    mean_c(r) + seed_sd * (sqrt(persistence) * z_s + sqrt(1 - persistence) * e_sr),   z, e ~ N(0, 1)

so a seed that is lucky early tends to stay lucky (`persistence` is the correlation of a seed's values
between rungs; 1 = a seed's luck never changes). The adaptive campaign starts `min_seeds` seeds per
condition, calls `policy.decide` at every rung on the conditions still running, stops what it
says, and at the last rung adds the seeds it asks for (up to `max_seeds`, at most `max_seeds - min_seeds`
rounds), looking again each time. A seed's steps count up to where its condition stopped. The grid runs
`grid_seeds` seeds (default `min_seeds`) of every condition to the last rung on the same draws (seed s
is the same run in both), and its winner is the best mean at the last rung.

Pure Python (`random`), no Ray: 1000 campaigns take about a second. The tests in
tests/campaign/test_adaptive_simulation.py hold the rates of issue 25; benchmarks may reuse `simulate`.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from retrain_ray.campaign.adaptive.policy import RungDecision, decide, planned_looks
from retrain_ray.results.significance import Family


@dataclass(frozen=True)
class Scenario:
    """True condition means (a number, or one per rung), seed noise and the adaptive settings."""

    means: Mapping[str, float | Sequence[float]]
    rungs: tuple[int, ...] = (25, 50, 100)
    min_seeds: int = 3
    max_seeds: int = 5
    seed_sd: float = 1.0
    persistence: float = 0.8
    mode: Literal["max", "min"] = "max"
    alpha: float = 0.05
    family: Family = "all-pairs"
    grid_seeds: int | None = None

    def mean(self, condition: str, rung: int) -> float:
        value = self.means[condition]
        return float(value) if isinstance(value, (int, float)) else float(value[rung])

    @property
    def best(self) -> str:
        """The truly best condition at the last rung (first on ties)."""
        last = len(self.rungs) - 1
        sign = 1.0 if self.mode == "max" else -1.0
        return max(self.means, key=lambda c: sign * self.mean(c, last))


@dataclass
class CampaignOutcome:
    steps: int
    grid_steps: int
    stopped: dict[str, int] = field(default_factory=dict)
    winner: str | None = None
    grid_winner: str | None = None
    declared: bool = False
    looks: int = 0
    seeds: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class SimulationSummary:
    campaigns: int
    best_stopped_rate: float
    any_stopped_rate: float
    declared_rate: float
    same_winner_rate: float
    steps_fraction: float
    max_looks: int
    planned_looks: int


def _draw(scenario: Scenario, rng: random.Random) -> dict[str, list[list[float]]]:
    """values[c][s][r] for every seed either campaign may run."""
    seeds = max(scenario.max_seeds, scenario.grid_seeds or scenario.min_seeds)
    p = scenario.persistence
    out: dict[str, list[list[float]]] = {}
    for cond in scenario.means:
        out[cond] = []
        for _ in range(seeds):
            z = rng.gauss(0.0, 1.0)
            out[cond].append([scenario.mean(cond, r) + scenario.seed_sd * (
                math.sqrt(p) * z + math.sqrt(1.0 - p) * rng.gauss(0.0, 1.0)) for r in range(len(scenario.rungs))])
    return out


def _grid_winner(scenario: Scenario, values: dict[str, list[list[float]]]) -> str:
    n = scenario.grid_seeds or scenario.min_seeds
    sign = 1.0 if scenario.mode == "max" else -1.0
    return max(values, key=lambda c: sign * math.fsum(v[-1] for v in values[c][:n]) / n)


Decider = Callable[[int, Mapping[str, Sequence[Sequence[float]]], dict[str, int], bool, bool, int], RungDecision]
"""A test at one look: (step, each live condition's seed trajectories up to this rung, seeds per condition,
last rung, can add seeds, re-look number) -> its decision."""


def bonferroni_decider(scenario: Scenario) -> Decider:
    """policy.decide at alpha / (planned looks), on each seed's value at this rung."""
    looks = planned_looks(len(scenario.rungs), scenario.min_seeds, scenario.max_seeds)

    def at_look(step: int, trajectories: Mapping[str, Sequence[Sequence[float]]], seeds: dict[str, int],
                last_rung: bool, can_add_seeds: bool, relook: int) -> RungDecision:
        return decide(step, {c: [t[-1] for t in ts] for c, ts in trajectories.items()},
                      seeds_by_condition=seeds, mode=scenario.mode, alpha=scenario.alpha,
                      max_seeds=scenario.max_seeds, last_rung=last_rung, can_add_seeds=can_add_seeds,
                      looks=looks, family=scenario.family)
    return at_look


def run_campaign(scenario: Scenario, values: dict[str, list[list[float]]], at_look: Decider) -> CampaignOutcome:
    """One adaptive campaign on drawn `values` (condition -> seed -> value at each rung) with `at_look` deciding
    every look, and the grid on the same draws."""
    seeds = dict.fromkeys(scenario.means, scenario.min_seeds)
    live = list(scenario.means)
    out = CampaignOutcome(0, len(scenario.means) * (scenario.grid_seeds or scenario.min_seeds) * scenario.rungs[-1],
                          grid_winner=_grid_winner(scenario, values))
    last = len(scenario.rungs) - 1
    rounds = 0
    decision: RungDecision | None = None
    for r, step in enumerate(scenario.rungs):
        while True:
            decision = at_look(step, {c: [v[:r + 1] for v in values[c][:seeds[c]]] for c in live}, seeds, r == last,
                               rounds < scenario.max_seeds - scenario.min_seeds, rounds)
            out.looks += 1
            for comparison in decision.stop:
                out.stopped[comparison.condition] = step
                live.remove(comparison.condition)
            if not decision.add_seed_to:
                break
            rounds += 1
            for cond in decision.add_seed_to:
                seeds[cond] += 1
    assert decision is not None
    out.winner = decision.leader
    out.declared = decision.decided
    out.seeds = seeds
    out.steps = sum(seeds[c] * out.stopped.get(c, scenario.rungs[-1]) for c in scenario.means)
    return out


def simulate_campaign(scenario: Scenario, rng: random.Random) -> CampaignOutcome:
    """One campaign: the adaptive run through `decide` (the Bonferroni split) and the grid on the same draws."""
    return run_campaign(scenario, _draw(scenario, rng), bonferroni_decider(scenario))


def simulate(scenario: Scenario, campaigns: int = 1000, seed: int = 0) -> SimulationSummary:
    """Rates over `campaigns` simulated campaigns (seeded: the same call gives the same numbers)."""
    rng = random.Random(seed)
    outcomes = [simulate_campaign(scenario, rng) for _ in range(campaigns)]
    best = scenario.best
    return SimulationSummary(
        campaigns=campaigns,
        best_stopped_rate=sum(best in o.stopped for o in outcomes) / campaigns,
        any_stopped_rate=sum(bool(o.stopped) for o in outcomes) / campaigns,
        declared_rate=sum(o.declared for o in outcomes) / campaigns,
        same_winner_rate=sum(o.winner == o.grid_winner for o in outcomes) / campaigns,
        steps_fraction=sum(o.steps for o in outcomes) / sum(o.grid_steps for o in outcomes),
        max_looks=max(o.looks for o in outcomes),
        planned_looks=planned_looks(len(scenario.rungs), scenario.min_seeds, scenario.max_seeds),
    )
