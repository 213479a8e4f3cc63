"""campaign/adaptive/sequential.py: the alpha-spending plan, the decision, and the simulation suite's
scenarios run with both tests on the same draws."""

import math

import pytest

from retrain_ray.campaign.adaptive import policy
from retrain_ray.campaign.adaptive.sequential import decide, look_levels, spent_alpha
from retrain_ray.campaign.adaptive.sequential_simulation import simulate_test
from retrain_ray.campaign.adaptive.simulation import Scenario

ALPHA = 0.05
CAMPAIGNS = 300


def test_spending_functions_by_hand():
    assert spent_alpha(0.0, ALPHA) == 0.0
    assert spent_alpha(1.0, ALPHA) == pytest.approx(ALPHA)
    assert spent_alpha(0.25, ALPHA) == pytest.approx(ALPHA * math.log(1 + (math.e - 1) * 0.25))   # 0.01787
    assert spent_alpha(1.0, ALPHA, "obrien-fleming") == pytest.approx(ALPHA)
    # 2 - 2 Phi(1.959964 / 0.5) = 2 - 2 Phi(3.919928) = 8.86e-5
    assert spent_alpha(0.25, ALPHA, "obrien-fleming") == pytest.approx(8.86e-5, rel=1e-2)
    with pytest.raises(ValueError, match="fraction"):
        spent_alpha(1.5, ALPHA)


@pytest.mark.parametrize("spending", ["pocock", "obrien-fleming"])
def test_the_levels_of_every_possible_look_sum_to_alpha(spending):
    levels = look_levels((25, 50, 100), 3, 5, ALPHA, spending)
    assert sorted(levels) == [25, 50, 100]
    assert levels[25] + levels[50] + 3 * levels[100] == pytest.approx(ALPHA)   # 1 look + 2 re-looks at 100


def test_pocock_spends_more_than_bonferroni_at_the_first_rung():
    levels = look_levels((25, 50, 100), 3, 5, ALPHA)
    assert levels[25] > ALPHA / policy.planned_looks(3, 3, 5)
    assert levels[25] == pytest.approx(spent_alpha(0.25, ALPHA))


def test_decide_is_policy_decide_at_the_looks_level():
    values = {"good": [1.0, 1.1, 0.9], "close": [0.95, 1.05, 0.9], "zero": [0.0, 0.01, -0.01]}
    seeds = {c: 3 for c in values}
    level = look_levels((25, 50, 100), 3, 5, ALPHA)[25]
    ours = decide(25, values, seeds_by_condition=seeds, mode="max", alpha=ALPHA, max_seeds=5, last_rung=False,
                  can_add_seeds=True, rungs=(25, 50, 100), min_seeds=3)
    theirs = policy.decide(25, values, seeds_by_condition=seeds, mode="max", alpha=level, max_seeds=5,
                           last_rung=False, can_add_seeds=True)
    assert ours == theirs and ours.alpha_per_look == pytest.approx(level)
    assert [c.condition for c in ours.stop] == ["zero"]
    with pytest.raises(ValueError, match="not a rung"):
        decide(30, values, seeds_by_condition=seeds, mode="max", alpha=ALPHA, max_seeds=5, last_rung=False,
               can_add_seeds=True, rungs=(25, 50, 100), min_seeds=3)


# The scenarios of tests/test_adaptive_simulation.py where the best condition is at risk, and those where
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
