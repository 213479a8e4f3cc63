"""The simulation suite of campaign/adaptive/simulation.py run with either test: `"bonferroni"`
(`policy.decide` at `alpha / looks`) or `"sequential"` (`sequential.decide`, the permutation test over all
looks, given each seed's values at the earlier rungs).
Same draws, same campaign loop, same summary, so the two tests are compared on identical campaigns
(a seeded `simulate_test` call with either test draws the same values). Beside the rates of
`SimulationSummary`, `TestFigures` counts the seeds started and the seed-steps spent.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from retrain_ray.campaign.adaptive import policy, sequential
from retrain_ray.campaign.adaptive.policy import RungDecision
from retrain_ray.campaign.adaptive.simulation import (
    CampaignOutcome,
    Decider,
    Scenario,
    SimulationSummary,
    bonferroni_decider,
    run_campaign,
)
from retrain_ray.campaign.adaptive.simulation import _draw as draw  # pyright: ignore[reportPrivateUsage]

Test = Literal["bonferroni", "sequential"]
# step, each live condition's seed trajectories up to the step, seeds started, last rung, can add seeds, re-look


@dataclass(frozen=True)
class TestFigures:
    """A test's rates over the simulated campaigns and what it spent: seeds started (mean per campaign)
    and seed-steps (as a fraction of the grid's)."""

    test: Test
    summary: SimulationSummary
    mean_seeds: float
    steps_fraction: float


def decider(scenario: Scenario, test: Test, spending: sequential.Spending = "early") -> Decider:
    """The decision function of `test` with the scenario's settings bound."""
    if test == "bonferroni":
        return bonferroni_decider(scenario)

    def decide(step: int, trajectories: Mapping[str, Sequence[Sequence[float]]], seeds: dict[str, int],
               last_rung: bool, can_add_seeds: bool, relook: int) -> RungDecision:
        values = {c: [t[-1] for t in ts] for c, ts in trajectories.items()}
        return sequential.decide(step, values, seeds_by_condition=seeds, mode=scenario.mode,
                                 alpha=scenario.alpha, max_seeds=scenario.max_seeds, last_rung=last_rung,
                                 can_add_seeds=can_add_seeds, rungs=scenario.rungs,
                                 min_seeds=scenario.min_seeds, family=scenario.family, spending=spending,
                                 earlier_values={c: [t[:-1] for t in ts] for c, ts in trajectories.items()},
                                 relook=relook if last_rung else 0)
    return decide


def simulate_campaign(scenario: Scenario, rng: random.Random, decide: Decider) -> CampaignOutcome:
    """One campaign (as simulation.simulate_campaign) with `decide` at every look."""
    return run_campaign(scenario, draw(scenario, rng), decide)


def simulate_test(scenario: Scenario, test: Test, campaigns: int = 1000, seed: int = 0,
                  spending: sequential.Spending = "early") -> TestFigures:
    """`campaigns` seeded campaigns of `scenario` decided by `test`: the same draws for either test."""
    rng = random.Random(seed)
    decide = decider(scenario, test, spending)
    outcomes = [simulate_campaign(scenario, rng, decide) for _ in range(campaigns)]
    best = scenario.best
    grid_steps = sum(o.grid_steps for o in outcomes)
    summary = SimulationSummary(
        campaigns=campaigns,
        best_stopped_rate=sum(best in o.stopped for o in outcomes) / campaigns,
        any_stopped_rate=sum(bool(o.stopped) for o in outcomes) / campaigns,
        declared_rate=sum(o.declared for o in outcomes) / campaigns,
        same_winner_rate=sum(o.winner == o.grid_winner for o in outcomes) / campaigns,
        steps_fraction=sum(o.steps for o in outcomes) / grid_steps,
        max_looks=max(o.looks for o in outcomes),
        planned_looks=policy.planned_looks(len(scenario.rungs), scenario.min_seeds, scenario.max_seeds),
    )
    mean_seeds = sum(sum(o.seeds.values()) for o in outcomes) / campaigns
    return TestFigures(test, summary, mean_seeds, summary.steps_fraction)
