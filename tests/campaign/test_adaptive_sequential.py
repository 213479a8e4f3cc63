"""campaign/adaptive/sequential.py and permutation.py: the alpha-spending plan, the permutation test
(exact values on a hand-enumerable case), and the simulation suite's scenarios run with both tests on
the same draws."""

import dataclasses
import math

import numpy as np
import pytest

from retrain_ray.campaign.adaptive import permutation, policy
from retrain_ray.campaign.adaptive.sequential import (
    cumulative_budgets,
    decide,
    look_levels,
    relook_level,
    spent_alpha,
)
from retrain_ray.campaign.adaptive.sequential_simulation import simulate_test
from retrain_ray.campaign.adaptive.simulation import Scenario

ALPHA = 0.05
CAMPAIGNS = 300


def test_spending_functions_by_hand():
    assert spent_alpha(0.0, ALPHA) == 0.0
    assert spent_alpha(1.0, ALPHA) == pytest.approx(ALPHA)
    assert spent_alpha(0.0625, ALPHA) == pytest.approx(ALPHA * 0.5)                      # 0.0625 ** (1/4) = 0.5
    assert spent_alpha(0.25, ALPHA, "pocock") == pytest.approx(ALPHA * math.log(1 + (math.e - 1) * 0.25))  # 0.01787
    assert spent_alpha(1.0, ALPHA, "obrien-fleming") == pytest.approx(ALPHA)
    # 2 - 2 Phi(1.959964 / 0.5) = 2 - 2 Phi(3.919928) = 8.86e-5
    assert spent_alpha(0.25, ALPHA, "obrien-fleming") == pytest.approx(8.86e-5, rel=1e-2)
    with pytest.raises(ValueError, match="fraction"):
        spent_alpha(1.5, ALPHA)


@pytest.mark.parametrize("spending", ["early", "pocock", "obrien-fleming"])
def test_the_levels_of_every_possible_look_sum_to_alpha(spending):
    levels = look_levels((25, 50, 100), 3, 5, ALPHA, spending)
    assert sorted(levels) == [25, 50, 100]
    assert sum(levels.values()) + 2 * relook_level((25, 50, 100), 3, 5, ALPHA) == pytest.approx(ALPHA)  # 2 re-looks
    assert relook_level((25, 50, 100), 3, 5, ALPHA) == pytest.approx(ALPHA / policy.planned_looks(3, 3, 5))


def test_the_rungs_share_is_spent_by_rung_index_not_by_step():
    """Rungs at 10, 20, 100 and at 50, 60, 100 measure the same seeds three times: the same plan."""
    assert list(look_levels((10, 20, 100), 3, 3, ALPHA).values()) == pytest.approx(
        list(look_levels((50, 60, 100), 3, 3, ALPHA).values()))
    assert look_levels((10, 20, 100), 3, 3, ALPHA)[10] == pytest.approx(ALPHA * (1 / 3) ** 0.25)   # 76% of alpha


def test_early_spending_gives_the_first_rung_more_than_pocock_and_bonferroni():
    levels = look_levels((25, 50, 100), 3, 5, ALPHA)
    assert levels[25] > look_levels((25, 50, 100), 3, 5, ALPHA, "pocock")[25] > ALPHA / policy.planned_looks(3, 3, 5)
    assert levels[25] == pytest.approx(spent_alpha(1 / 3, ALPHA * 3 / 5))


# Two conditions of 3 seeds with the values 0..5: the 20 splits of {0..5} into 3 + 3, by the sum S of the
# first group, give |mean difference| = |2 S - 15| / 3: 3 (S = 3, 12: 2 splits), 7/3 (2), 5/3 (4),
# 1 (6), 1/3 (6).
GOOD, BAD = [3.0, 4.0, 5.0], [0.0, 1.0, 2.0]


def _hand_statistics(looks: int) -> np.ndarray:
    values = np.array([[v] * looks for v in GOOD + BAD])
    return permutation.range_of_means(values, [3, 3], permutation.relabellings([3, 3], 1000))


def test_the_twenty_splits_of_three_and_three_seeds_are_enumerated():
    rows = permutation.relabellings([3, 3], 1000)
    assert permutation.arrangement_count([3, 3]) == 20 and rows.shape == (20, 6)
    assert rows[0].tolist() == [0, 1, 2, 3, 4, 5]                     # the observed labelling first
    assert len({tuple(sorted(r[:3])) for r in rows.tolist()}) == 20
    stats = sorted(_hand_statistics(1)[:, 0].round(9).tolist(), reverse=True)
    assert stats == pytest.approx([3.0] * 2 + [7 / 3] * 2 + [5 / 3] * 4 + [1.0] * 6 + [1 / 3] * 6)


def test_boundaries_by_hand():
    one_look = _hand_statistics(1)
    assert permutation.boundaries(one_look, [0.2]) == pytest.approx([5 / 3])   # 4 of 20 splits above
    assert permutation.boundaries(one_look, [0.05]) == [3.0]                   # nothing can cross
    # the same values at both looks (a seed's luck never changes): the second look spends the whole
    # cumulative 0.2, where a union bound would leave it 0.2 - 0.1 and a boundary of 3 (no split above)
    assert permutation.boundaries(_hand_statistics(2), [0.1, 0.2]) == pytest.approx([7 / 3, 5 / 3])


def _decide(step: int, alpha: float, rungs: tuple[int, ...], **kwargs: object):
    values = {"good": GOOD, "bad": BAD}
    return decide(step, values, seeds_by_condition={"good": 3, "bad": 3}, mode="max", alpha=alpha, max_seeds=3,
                  last_rung=step == rungs[-1], can_add_seeds=False, rungs=rungs, min_seeds=3, **kwargs)


def test_a_single_look_is_the_exact_permutation_test():
    stopped = _decide(10, 0.2, (10,))
    assert [c.condition for c in stopped.stop] == ["bad"] and stopped.leader == "good"
    (bad,) = stopped.comparisons
    assert bad.p_value == pytest.approx(2 / 20) and bad.test == "sequential-permutation"
    assert bad.diff == pytest.approx(-3.0) and stopped.alpha_per_look == pytest.approx(4 / 20)
    kept = _decide(10, ALPHA, (10,))          # p = 0.1 > 0.05: 3 seeds a side cannot reach 5%
    assert not kept.stop and kept.comparisons[0].verdict == "undecided"
    assert kept.comparisons[0].p_value == pytest.approx(0.1)


def test_the_earlier_looks_of_the_same_seeds_leave_the_later_look_its_cumulative_alpha():
    earlier = {"good": [[v] for v in GOOD], "bad": [[v] for v in BAD]}
    assert cumulative_budgets(20, (10, 20), 3, 3, 0.2) == pytest.approx([spent_alpha(0.5, 0.2), 0.2])
    joint = _decide(20, 0.2, (10, 20), earlier_values=earlier)
    assert [c.condition for c in joint.stop] == ["bad"] and joint.alpha_per_look == pytest.approx(4 / 20)
    alone = _decide(20, 0.2, (10, 20))        # no trajectories: this look's own share, 0.2 - 0.168
    assert not alone.stop and alone.alpha_per_look == 0.0


def test_step_down_stops_every_clearly_worse_condition():
    values = {"best": [10.0, 10.1, 9.9, 10.2], "mid": [5.0, 5.1, 4.9, 5.2], "low": [0.0, 0.1, -0.1, 0.2]}
    decision = decide(25, values, seeds_by_condition=dict.fromkeys(values, 4), mode="max", alpha=ALPHA,
                      max_seeds=4, last_rung=False, can_add_seeds=False, rungs=(25,), min_seeds=4)
    assert decision.leader == "best" and sorted(c.condition for c in decision.stop) == ["low", "mid"]
    with pytest.raises(ValueError, match="not a rung"):
        decide(30, values, seeds_by_condition=dict.fromkeys(values, 4), mode="max", alpha=ALPHA, max_seeds=4,
               last_rung=False, can_add_seeds=False, rungs=(25,), min_seeds=4)


def test_a_relook_after_seeds_were_added_is_tested_at_its_own_share():
    rungs = (25, 50, 100)
    values = {"good": [1.0, 1.1, 0.9, 1.0], "close": [0.95, 1.05, 0.9, 1.0]}
    earlier = {c: [[v, v] for v in vs] for c, vs in values.items()}
    decision = decide(100, values, seeds_by_condition=dict.fromkeys(values, 4), mode="max", alpha=ALPHA,
                      max_seeds=5, last_rung=True, can_add_seeds=True, rungs=rungs, min_seeds=3,
                      earlier_values=earlier, relook=1)
    assert not decision.stop and decision.add_seed_to == ("good", "close")
    assert decision.alpha_per_look <= relook_level(rungs, 3, 5, ALPHA)


# The scenarios of tests/campaign/test_adaptive_simulation.py where the best condition is at risk, and those where
# the others are clearly worse.
AT_RISK = {
    "close race, 3 seeds": Scenario({"a": 0.0, "b": -0.5, "c": -0.5, "d": -4.0}, min_seeds=3, max_seeds=5),
    "near tie, 2 seeds": Scenario({"a": 0.1, "b": 0.0, "c": 0.0}, rungs=(40, 80, 160), min_seeds=2, max_seeds=4),
    "minimising": Scenario({"a": -0.5, "b": 0.0, "c": 0.0}, mode="min", min_seeds=3, max_seeds=6),
    "equal, seeds that do not persist": Scenario(dict.fromkeys("abc", 0.0), min_seeds=5, max_seeds=7,
                                                 persistence=0.0),
}
SEPARATED = {
    "2 sd, 10 seeds": Scenario({"a": 0.0, "b": -2.0, "c": -2.0, "d": -2.0}, min_seeds=10, max_seeds=12),
    "4 sd, 5 seeds": Scenario({"a": 0.0, "b": -4.0, "c": -4.0, "d": -4.0}, min_seeds=5, max_seeds=7),
}


@pytest.mark.parametrize("name", [*AT_RISK, *SEPARATED])
def test_the_sequential_test_stops_the_best_condition_in_at_most_alpha_of_campaigns(name):
    scenario = {**AT_RISK, **SEPARATED}[name]
    figures = simulate_test(scenario, "sequential", CAMPAIGNS)
    assert figures.summary.best_stopped_rate <= ALPHA, figures
    assert figures.summary.max_looks <= figures.summary.planned_looks


@pytest.mark.parametrize("name", SEPARATED)
def test_the_sequential_test_spends_fewer_steps_than_bonferroni_on_the_same_draws(name):
    bonferroni = simulate_test(SEPARATED[name], "bonferroni", CAMPAIGNS)
    sequential = simulate_test(SEPARATED[name], "sequential", CAMPAIGNS)
    assert sequential.steps_fraction < bonferroni.steps_fraction
    assert sequential.mean_seeds <= bonferroni.mean_seeds
    assert sequential.summary.same_winner_rate >= 1 - ALPHA


def test_the_bonferroni_arm_reproduces_the_simulation_module():
    from retrain_ray.campaign.adaptive.simulation import simulate

    scenario = SEPARATED["4 sd, 5 seeds"]
    assert simulate_test(scenario, "bonferroni", 100, seed=7).summary == simulate(scenario, 100, seed=7)


def _dense(scenario: Scenario) -> Scenario:
    last = scenario.rungs[-1]
    return dataclasses.replace(scenario, rungs=tuple(last * k // 10 for k in range(1, 11)))


def test_ten_looks_keep_the_guarantee_with_two_seeds_where_splits_tie_with_the_boundary():
    figures = simulate_test(_dense(AT_RISK["near tie, 2 seeds"]), "sequential", 200)
    assert figures.summary.best_stopped_rate <= ALPHA, figures


@pytest.mark.parametrize("name", SEPARATED)
def test_ten_looks_cost_the_sequential_test_little_and_the_bonferroni_split_much(name):
    scenario = _dense(SEPARATED[name])
    bonferroni = simulate_test(scenario, "bonferroni", 200)
    sequential = simulate_test(scenario, "sequential", 200)
    assert sequential.summary.best_stopped_rate <= ALPHA
    assert sequential.steps_fraction <= 0.85 * bonferroni.steps_fraction   # measured 0.80 at 200 campaigns
