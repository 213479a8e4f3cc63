"""The simulation suite of campaign/adaptive/simulation.py run with either test: `"bonferroni"`
(`policy.decide` at `alpha / looks`) or `"sequential"` (`sequential.decide`, the permutation test over all
looks, given each seed's values at the earlier rungs).
Same draws, same campaign loop, same summary, so the two tests are compared on identical campaigns
(a seeded `simulate_test` call with either test draws the same values). Beside the rates of
`SimulationSummary`, `TestFigures` counts the seeds started and the seed-steps spent.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from retrain_ray.campaign.adaptive import policy, sequential
from retrain_ray.campaign.adaptive.policy import RungDecision
from retrain_ray.campaign.adaptive.simulation import CampaignOutcome, Scenario, SimulationSummary
from retrain_ray.campaign.adaptive.simulation import _draw as draw  # pyright: ignore[reportPrivateUsage]
from retrain_ray.campaign.adaptive.simulation import _grid_winner as grid_winner  # pyright: ignore[reportPrivateUsage]

Test = Literal["bonferroni", "sequential"]
# step, each live condition's seed trajectories up to the step, seeds started, last rung, can add seeds, re-look
Decider = Callable[[int, Mapping[str, Sequence[Sequence[float]]], dict[str, int], bool, bool, int], RungDecision]


@dataclass(frozen=True)
class TestFigures:
    """A test's rates over the simulated campaigns and what it spent: seeds started (mean per campaign)
    and seed-steps (as a fraction of the grid's)."""

    test: Test
    summary: SimulationSummary
    mean_seeds: float
    steps_fraction: float


def decider(scenario: Scenario, test: Test, spending: sequential.Spending = "pocock") -> Decider:
    """The decision function of `test` with the scenario's settings bound."""
    looks = policy.planned_looks(len(scenario.rungs), scenario.min_seeds, scenario.max_seeds)

    def decide(step: int, trajectories: Mapping[str, Sequence[Sequence[float]]], seeds: dict[str, int],
               last_rung: bool, can_add_seeds: bool, relook: int) -> RungDecision:
        values = {c: [t[-1] for t in ts] for c, ts in trajectories.items()}
        if test == "bonferroni":
            return policy.decide(step, values, seeds_by_condition=seeds, mode=scenario.mode,
                                 alpha=scenario.alpha, max_seeds=scenario.max_seeds, last_rung=last_rung,
                                 can_add_seeds=can_add_seeds, looks=looks, family=scenario.family)
        return sequential.decide(step, values, seeds_by_condition=seeds, mode=scenario.mode,
                                 alpha=scenario.alpha, max_seeds=scenario.max_seeds, last_rung=last_rung,
                                 can_add_seeds=can_add_seeds, rungs=scenario.rungs,
                                 min_seeds=scenario.min_seeds, family=scenario.family, spending=spending,
                                 earlier_values={c: [t[:-1] for t in ts] for c, ts in trajectories.items()},
                                 relook=relook if last_rung else 0)
    return decide


def simulate_campaign(scenario: Scenario, rng: random.Random, decide: Decider) -> CampaignOutcome:
    """One campaign (as simulation.simulate_campaign) with `decide` at every look."""
    values = draw(scenario, rng)
    seeds = dict.fromkeys(scenario.means, scenario.min_seeds)
    live = list(scenario.means)
    grid_seeds = scenario.grid_seeds or scenario.min_seeds
    out = CampaignOutcome(0, len(scenario.means) * grid_seeds * scenario.rungs[-1],
                          grid_winner=grid_winner(scenario, values))
    last = len(scenario.rungs) - 1
    rounds = 0
    decision: RungDecision | None = None
    for r, step in enumerate(scenario.rungs):
        while True:
            decision = decide(step, {c: [v[:r + 1] for v in values[c][:seeds[c]]] for c in live}, seeds, r == last,
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


def simulate_test(scenario: Scenario, test: Test, campaigns: int = 1000, seed: int = 0,
                  spending: sequential.Spending = "pocock") -> TestFigures:
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
