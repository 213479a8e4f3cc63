"""results/seeds_needed.py: the pilot's spread and the seeds a difference needs, on hand-computed cases."""

import math

import pytest

from retrain_ray.results.seeds_needed import seed_spread, seeds_needed

PILOT = {"a": [1.0, 2.0, 3.0], "b": [2.0, 4.0]}   # sums of squares 2 and 2 over 2 + 1 df


def test_spread_is_pooled_over_each_conditions_own_mean():
    spread = seed_spread(PILOT)
    assert spread.by_condition == {"a": 1.0, "b": pytest.approx(math.sqrt(2.0))}
    assert spread.pooled == pytest.approx(math.sqrt(4.0 / 3.0))
    assert (spread.pilot_seeds, spread.degrees_of_freedom) == (5, 3)


def test_normal_approximation_by_hand():
    # (z_0.975 + z_0.8)^2 = (1.959964 + 0.841621)^2 = 7.84887; n = 2 * 7.84887 * (4/3) / d^2
    assert seeds_needed(PILOT, 1.0, approximation="normal").seeds_per_condition == 21    # 20.93
    assert seeds_needed(PILOT, 0.5, approximation="normal").seeds_per_condition == 84    # 83.72
    assert seeds_needed(PILOT, 2.0, approximation="normal").seeds_per_condition == 6     # 5.23


def test_welch_form_matches_the_t_test_tables():
    # effect size 1 sd (Cohen's d = 1), alpha 0.05 two-sided, power 0.8: the t-test needs 17 per group
    unit = {"a": [-1.0, 1.0], "b": [-1.0, 1.0]}   # pooled sd sqrt(2)
    assert seeds_needed(unit, math.sqrt(2.0)).seeds_per_condition == 17
    # d = 0.5: 64 per group; power 0.9 at d = 1: 23 per group
    assert seeds_needed(unit, math.sqrt(2.0) / 2).seeds_per_condition == 64
    assert seeds_needed(unit, math.sqrt(2.0), power=0.9).seeds_per_condition == 23


def test_welch_asks_for_at_least_the_normal_figure():
    for detect in (0.3, 1.0, 3.0):
        assert seeds_needed(PILOT, detect).seeds_per_condition >= \
            seeds_needed(PILOT, detect, approximation="normal").seeds_per_condition


def test_describe_names_the_spread_and_the_seeds():
    line = seeds_needed(PILOT, 1.0).describe()
    assert line.startswith("seed-to-seed sd 1.155 (pooled over 5 seeds); a difference of 1 needs ")
    assert "seeds per condition (two-sided alpha 0.05, power 0.8, welch)" in line


def test_pilots_without_two_seeds_or_a_positive_difference_are_refused():
    with pytest.raises(ValueError, match="at least 2 per condition"):
        seed_spread({"a": [1.0, 2.0], "b": [1.0, float("nan")]})
    with pytest.raises(ValueError, match="positive difference"):
        seeds_needed(PILOT, 0.0)
    with pytest.raises(ValueError, match="strictly between 0 and 1"):
        seeds_needed(PILOT, 1.0, power=1.0)
