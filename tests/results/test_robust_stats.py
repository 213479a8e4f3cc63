"""results/robust_stats.py: exact values on hand-computed cases, properties, and rliable's figures."""

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from retrain_ray.results.robust_stats import (
    Interval,
    as_matrix,
    condition_stats,
    improvements,
    iqm,
    iqm_weights,
    performance_profiles,
    probability_of_improvement,
)

FIXTURE = Path(__file__).parents[1] / "fixtures" / "rliable_reference.json"
finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False)


# ---- exact values -----------------------------------------------------------------------------------

def test_iqm_drops_a_quarter_from_each_end_as_rliable_does():
    assert iqm([4.0, 1.0, 3.0, 2.0]) == 2.5                        # middle two of 1..4
    assert iqm([1.0, 2.0, 3.0, 4.0, 100.0]) == 3.0                  # floor(5/4)=1 cut each end: (2+3+4)/3
    assert iqm([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 100.0]) == 4.5   # 3..6
    assert iqm([7.0]) == 7.0 and iqm([1.0, 3.0]) == 2.0 and iqm([1.0, 2.0, 9.0]) == 4.0


def test_fractional_iqm_weights_the_end_scores_by_their_share_of_the_middle_half():
    # n = 5: the middle half is [1.25, 3.75) in rank units -> weights 0.75, 1, 0.75 over ranks 1..3
    assert iqm_weights(5, fractional=True) == pytest.approx([0.0, 0.3, 0.4, 0.3, 0.0])
    assert iqm([1.0, 2.0, 3.0, 4.0, 100.0], fractional=True) == pytest.approx(0.3 * 2 + 0.4 * 3 + 0.3 * 4)
    assert iqm_weights(4, fractional=True) == pytest.approx(iqm_weights(4))   # a multiple of 4: the same
    assert iqm_weights(6, fractional=True) == pytest.approx([0, 1 / 6, 1 / 3, 1 / 3, 1 / 6, 0])


def test_iqm_flattens_runs_by_tasks():
    assert iqm([[1.0, 8.0], [2.0, 7.0], [3.0, 6.0], [4.0, 5.0]]) == 4.5   # middle 4 of 1..8


def test_probability_of_improvement_counts_ties_half():
    # 1 beats 0; 2 ties two 2s and beats 0; 3 beats all three: (1 + 1 + 3 + 0.5 * 2) / 9
    assert probability_of_improvement([1.0, 2.0, 3.0], [2.0, 2.0, 0.0]) == pytest.approx(6 / 9)
    assert probability_of_improvement([1.0], [1.0]) == 0.5
    # two tasks: 1.0 on the first, 0.0 on the second -> averaged 0.5
    assert probability_of_improvement([[5.0, 0.0]], [[1.0, 2.0]]) == 0.5


def test_intervals_on_one_run_are_the_run_and_two_runs_are_hand_computable():
    single = condition_stats({"a": [3.0]}, reps=100)["a"]
    assert single.mean == Interval(3.0, 3.0, 3.0) and single.iqm == Interval(3.0, 3.0, 3.0)
    # two runs 0 and 1: a resample's mean is 0, 0.5 or 1 with chances 1/4, 1/2, 1/4
    pair = condition_stats({"a": [0.0, 1.0]}, reps=20_000, confidence=0.5)["a"].mean
    assert (pair.estimate, pair.low, pair.high) == (0.5, 0.5, 0.5)
    wide = condition_stats({"a": [0.0, 1.0]}, reps=20_000)["a"].mean
    assert (wide.low, wide.high) == (0.0, 1.0)


def test_profile_counts_scores_strictly_above_each_threshold():
    profile = performance_profiles({"a": [1.0, 2.0, 3.0, 4.0]}, [0.0, 2.0, 4.0], reps=200)["a"]
    assert profile.fraction == (1.0, 0.5, 0.0)
    assert profile.low[0] == profile.high[0] == 1.0 and profile.low[2] == profile.high[2] == 0.0
    assert profile.low[1] <= 0.5 <= profile.high[1]


def test_seeded_and_reproducible():
    scores = {"a": [0.1, 0.5, 0.3, 0.9], "b": [0.2, 0.2, 0.4]}
    assert condition_stats(scores, reps=500, seed=3) == condition_stats(scores, reps=500, seed=3)
    assert improvements(scores, reps=500, seed=3) == improvements(scores, reps=500, seed=3)
    assert condition_stats(scores, reps=500, seed=3) != condition_stats(scores, reps=500, seed=4)


def test_bad_scores_are_refused():
    with pytest.raises(ValueError, match="NaN or infinity"):
        iqm([1.0, float("nan")])
    with pytest.raises(ValueError, match="at least one run"):
        as_matrix([])
    with pytest.raises(ValueError, match="same tasks"):
        probability_of_improvement([[1.0, 2.0]], [1.0])


# ---- properties -------------------------------------------------------------------------------------

@settings(max_examples=60, deadline=None)
@given(st.lists(finite, min_size=1, max_size=30), st.booleans())
def test_iqm_lies_between_min_and_max(values, fractional):
    assert min(values) - 1e-9 <= iqm(values, fractional=fractional) <= max(values) + 1e-9


@settings(max_examples=60, deadline=None)
@given(st.lists(finite, min_size=1, max_size=8), st.lists(finite, min_size=1, max_size=8))
def test_probability_of_improvement_is_complementary(x, y):
    assert probability_of_improvement(x, y) + probability_of_improvement(y, x) == pytest.approx(1.0)


@settings(max_examples=25, deadline=None)
@given(st.lists(finite, min_size=2, max_size=8), st.lists(finite, min_size=2, max_size=8), st.randoms())
def test_invariant_to_the_order_of_runs_and_conditions(x, y, rnd):
    shuffled_x, shuffled_y = x[:], y[:]
    rnd.shuffle(shuffled_x)
    rnd.shuffle(shuffled_y)
    before = {"x": x, "y": y}
    after = {"y": shuffled_y, "x": shuffled_x}
    assert condition_stats(before, reps=300) == condition_stats(after, reps=300)
    assert {(i.condition, i.other): i for i in improvements(before, reps=300)} == \
        {(i.condition, i.other): i for i in improvements(after, reps=300)}
    assert performance_profiles(before, [0.0], reps=300) == performance_profiles(after, [0.0], reps=300)


@settings(max_examples=10, deadline=None)
@given(st.integers(min_value=0, max_value=2**31 - 1))
def test_intervals_shrink_with_more_seeds_from_the_same_distribution(seed):
    rng = np.random.default_rng(seed)
    # the same empirical distribution with 16 times the seeds: two independent draws would let a tight
    # 5-seed draw beat an 80-seed one by chance (seed 8293 did)
    few = rng.normal(size=5)
    many = np.tile(few, 16)
    small = condition_stats({"few": few, "many": many}, reps=2000, seed=seed)
    for stat in ("mean", "iqm"):
        width_few = getattr(small["few"], stat).high - getattr(small["few"], stat).low
        width_many = getattr(small["many"], stat).high - getattr(small["many"], stat).low
        assert width_many < width_few
    # P(X > Y) of one small draw can be degenerate (complete separation: [1, 1]); the same empirical
    # distributions with 16 times the seeds must give an interval no wider, and narrower when it has width
    x, y = rng.normal(0.5, 1.0, size=5), rng.normal(size=5)
    small_pair, large_pair = improvements({"x": x, "y": y, "x16": np.tile(x, 16), "y16": np.tile(y, 16)},
                                          pairs=[("x", "y"), ("x16", "y16")], reps=2000, seed=seed)
    width_small = small_pair.probability.high - small_pair.probability.low
    width_large = large_pair.probability.high - large_pair.probability.low
    assert width_large < width_small or width_small == width_large == 0.0


@settings(max_examples=30, deadline=None)
@given(st.lists(finite, min_size=1, max_size=10))
def test_point_estimates_lie_inside_their_intervals_bounds_of_the_data(values):
    stats = condition_stats({"a": values}, reps=200)["a"]
    for interval in (stats.mean, stats.iqm):
        assert min(values) - 1e-6 <= interval.low <= interval.high <= max(values) + 1e-6


# ---- against rliable ----------------------------------------------------------------------------------

def _fixture():
    return json.loads(FIXTURE.read_text())


NOISE_SEEDS = 10


def _within_noise(ours: list[Interval], theirs: list[float]):
    """Point estimates equal; rliable's interval ends within the bootstrap's noise: 4 standard deviations
    of our end over NOISE_SEEDS seeds, plus 3% of the interval's width because a percentile of a lumpy
    bootstrap distribution (few runs, an outlier) jumps between neighbouring values, which 10 seeds
    under-sample (measured: rliable's own IQM end moved by 0.0034 between two runs at the same seed, 2%
    of the width). An end that never moves (a probability of 1) must match to rounding."""
    assert ours[0].estimate == pytest.approx(theirs[0], abs=1e-12)
    width = float(np.mean([interval.high - interval.low for interval in ours]))
    for index, end in ((1, "low"), (2, "high")):
        values = np.array([getattr(interval, end) for interval in ours])
        assert abs(theirs[index] - values.mean()) <= 4 * values.std() + 0.03 * width + 1e-9, (end, theirs, values)


def test_agrees_with_rliables_recorded_figures():
    """Recorded by tests/fixtures/make_rliable_reference.py with the rliable version the fixture names
    (`source`), at the same number of resamples (`reps`); rliable was seeded with `seed`, ours with
    NOISE_SEEDS seeds to measure the noise."""
    ref = _fixture()
    scores = {c: np.asarray(s) for c, s in ref["scores"].items()}
    seeds = range(ref["seed"], ref["seed"] + NOISE_SEEDS)
    stats = [condition_stats(scores, reps=ref["reps"], seed=seed) for seed in seeds]
    for figure in ("iqm", "mean"):
        for condition, theirs in ref[figure].items():
            _within_noise([getattr(run[condition], figure) for run in stats], theirs)
    for key, theirs in ref["probability_of_improvement"].items():
        x, y = key.split(" > ")
        _within_noise([improvements(scores, pairs=[(x, y)], reps=ref["reps"], seed=seed)[0].probability
                       for seed in seeds], theirs)
    profiles = [performance_profiles(scores, ref["thresholds"], reps=ref["reps"], seed=seed) for seed in seeds]
    for condition, (point, low, high) in ref["profiles"].items():
        assert profiles[0][condition].fraction == pytest.approx(point, abs=1e-12)
        for ours, theirs in ((np.array([p[condition].low for p in profiles]), low),
                             (np.array([p[condition].high for p in profiles]), high)):
            assert np.all(np.abs(np.asarray(theirs) - ours.mean(axis=0)) <= 4 * ours.std(axis=0) + 1e-9)


def _rliable():
    """rliable's library and metrics modules, or a skip saying why they cannot be used here."""
    try:
        from rliable import library, metrics
    except ImportError:
        pytest.skip("rliable is not installed (pip install -e '.[stats-check]')")
    except Exception as error:   # rliable 1.2.0's arch 7.2 fails to import under pandas 3 (a TypeError)
        pytest.skip(f"rliable is installed but does not import here: {type(error).__name__}: {error}")
    return library, metrics


def test_agrees_with_rliable_run_live():
    rly, metrics = _rliable()
    ref = _fixture()
    scores = {c: np.asarray(s, dtype=float) for c, s in ref["scores"].items()}
    points, intervals = rly.get_interval_estimates(scores, lambda x: np.array([metrics.aggregate_iqm(x)]),
                                                   reps=ref["reps"],
                                                   random_state=np.random.RandomState(ref["seed"]))
    stats = [condition_stats(scores, reps=ref["reps"], seed=seed)
             for seed in range(ref["seed"], ref["seed"] + NOISE_SEEDS)]
    for condition in scores:
        theirs = [float(points[condition][0]), float(intervals[condition][0][0]), float(intervals[condition][1][0])]
        _within_noise([run[condition].iqm for run in stats], theirs)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 6), st.integers(1, 6), st.integers(1, 3), st.integers(0, 2**31 - 1), st.booleans())
def test_improvement_from_ranks_equals_the_pairwise_count(n, m, tasks, seed, coarse):
    # the rank form (U from average ranks) must be the n x m comparison count, ties half, in every resample
    from retrain_ray.results.robust_stats import _improvement

    rng = np.random.default_rng(seed)
    draw = (lambda size: rng.integers(0, 3, size).astype(float)) if coarse else (lambda size: rng.normal(size=size))
    x, y = draw((4, n, tasks)), draw((4, m, tasks))
    above = (x[:, :, None, :] > y[:, None, :, :]).mean(axis=(1, 2))
    ties = (x[:, :, None, :] == y[:, None, :, :]).mean(axis=(1, 2))
    np.testing.assert_allclose(_improvement(x, y), (above + 0.5 * ties).mean(axis=1), rtol=0, atol=1e-12)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 9), st.integers(1, 9), st.integers(1, 3), st.integers(0, 2**31 - 1), st.booleans())
def test_improvement_from_draw_counts_equals_the_ranks_of_every_resample(n, m, tasks, seed, coarse):
    # the bootstrap's count form must give the rank form's figures bit for bit, on the same draws
    from retrain_ray.results.robust_stats import _improvement, _resample, _resampled_improvement

    rng = np.random.default_rng(seed)
    draw = (lambda size: rng.integers(0, 3, size).astype(float)) if coarse else (lambda size: rng.normal(size=size))
    x, y = np.sort(draw((n, tasks)), axis=0), np.sort(draw((m, tasks)), axis=0)
    by_ranks = np.random.default_rng(seed)
    expected = _improvement(_resample(x, 50, by_ranks), _resample(y, 50, by_ranks))
    assert np.array_equal(_resampled_improvement(x, y, 50, np.random.default_rng(seed)), expected)
