"""Welch's t, the t distribution and Holm's correction against hand-computed and tabulated values, and
properties of `compare_to_leader` (issue 25)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from retrain_ray.results.significance import (
    compare_to_leader,
    holm,
    t_quantile,
    t_sf2,
    welch,
)


@pytest.mark.parametrize(("t", "df", "p"), [
    (12.706, 1, 0.05), (4.303, 2, 0.05), (2.228, 10, 0.05), (2.042, 30, 0.05),   # t tables, two-sided 5%
    (63.657, 1, 0.01), (3.169, 10, 0.01),                                        # two-sided 1%
    (1.0, 1, 0.5),                                                               # Cauchy: P(|T| > 1) = 1/2
])
def test_t_tail_matches_tables(t, df, p):
    assert t_sf2(t, df) == pytest.approx(p, abs=2e-4)


@pytest.mark.parametrize(("t", "df", "p"), [
    # by numerical integration of the t density (mpmath, 30 digits), non-integer df included
    (2.2514363231593695, 5.520787746170677, 0.0691335931923924),
    (3.0, 2.5, 0.0725760955490318),
    (0.5, 30, 0.620723004885127),
])
def test_t_tail_matches_integration(t, df, p):
    assert t_sf2(t, df) == pytest.approx(p, rel=1e-10)


@pytest.mark.parametrize(("q", "df", "t"), [(0.975, 1, 12.7062), (0.975, 2, 4.3027), (0.975, 10, 2.2281),
                                            (0.995, 3, 5.8409), (0.975, 1e6, 1.9600), (0.025, 10, -2.2281)])
def test_t_quantile_matches_tables(q, df, t):
    assert t_quantile(q, df) == pytest.approx(t, abs=1e-4)


def test_welch_by_hand():
    # a: mean 2.5, var 5/3; b: mean 6, var 10. se^2 = 5/12 + 2 = 29/12, t = -3.5 / sqrt(29/12),
    # df = (29/12)^2 / ((5/12)^2 / 3 + 2^2 / 4) = 5.5208; the CI half-width is t_{0.975, df} sqrt(29/12).
    w = welch([1, 2, 3, 4], [2, 4, 6, 8, 10])
    assert w.diff == -3.5
    assert w.t == pytest.approx(-3.5 / math.sqrt(29 / 12))
    assert w.df == pytest.approx((29 / 12) ** 2 / ((5 / 12) ** 2 / 3 + 1.0), rel=1e-12)
    assert w.p_value == pytest.approx(0.0691335931923924, rel=1e-10)
    assert (w.ci_low, w.ci_high) == pytest.approx((-7.385368080514045, 0.385368080514045), rel=1e-9)


def test_welch_zero_variance():
    assert welch([1.0, 1.0], [1.0, 1.0]).p_value == 1.0
    certain = welch([0.0, 0.0], [1.0, 1.0])
    assert (certain.p_value, certain.ci_low, certain.ci_high) == (0.0, -1.0, -1.0)
    with pytest.raises(ValueError, match="at least 2 values"):
        welch([1.0], [1.0, 2.0])


def test_holm_by_hand():
    # sorted: 0.005 * 4 = 0.02, 0.01 * 3 = 0.03, 0.03 * 2 = 0.06, 0.04 * 1 = 0.04 -> running max 0.06
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])
    assert holm([]) == []


def test_compare_to_leader_by_hand():
    leader, comparisons = compare_to_leader({"a": [1, 2, 3], "b": [5, 6, 7], "c": [5.5, 6, 6.5], "d": [1]})
    assert leader == "b"
    by = {c.condition: c for c in comparisons}
    # a vs b: t = -4 / sqrt(2/3), df = 4, raw p = 0.00805; Holm over the 3 testable pairs (a,b), (a,c), (b,c):
    # (a,c) has t = -4 / sqrt(5/12) but only df = 2.94 (p = 0.0091), so (a,b) has the smallest p: x3
    assert by["a"].verdict == "worse" and by["a"].diff == -4.0
    assert by["a"].raw_p_value == pytest.approx(t_sf2(-4 / math.sqrt(2 / 3), 4))
    assert by["a"].p_value == pytest.approx(3 * by["a"].raw_p_value)
    assert (by["a"].seeds, by["a"].reference_seeds, by["a"].test) == (3, 3, "welch-holm")
    assert by["c"].verdict == "undecided" and by["c"].p_value == 1.0
    # one seed: not tested, p = 1, infinite CI
    assert (by["d"].verdict, by["d"].p_value, by["d"].ci_low, by["d"].ci_high) == ("undecided", 1.0, -math.inf, math.inf)
    assert compare_to_leader({"a": [], "b": [math.nan]}) == (None, ())


def test_leader_family_is_the_k_minus_1_comparisons():
    _, comparisons = compare_to_leader({"a": [1, 2, 3], "b": [5, 6, 7], "c": [5.5, 6, 6.5]}, family="leader")
    a = next(c for c in comparisons if c.condition == "a")
    assert a.p_value == pytest.approx(2 * a.raw_p_value)   # 2 comparisons with the leader; a's is the smallest


seed_values = st.lists(st.floats(-100, 100, allow_nan=False), min_size=2, max_size=6)
campaigns = st.dictionaries(st.sampled_from("abcde"), seed_values, min_size=2, max_size=5)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0.0, 1.0), min_size=1, max_size=12))
def test_holm_is_at_least_raw_and_keeps_the_order(p_values):
    adjusted = holm(p_values)
    assert all(a >= p for a, p in zip(adjusted, p_values, strict=True))
    assert all(a <= 1.0 for a in adjusted)
    pairs = sorted(zip(p_values, adjusted, strict=True))
    assert all(x[1] <= y[1] for x, y in zip(pairs, pairs[1:], strict=False))


@settings(max_examples=200, deadline=None)
@given(campaigns)
def test_ci_contains_the_difference_and_leader_is_best(values):
    leader, comparisons = compare_to_leader(values)
    assert leader is not None
    means = {c: sum(v) / len(v) for c, v in values.items()}
    assert means[leader] == max(means.values())
    for c in comparisons:
        assert c.ci_low <= c.diff <= c.ci_high
        assert c.p_value >= c.raw_p_value
        assert c.verdict in ("worse", "undecided")   # nothing beats the leader under its own mode


@settings(max_examples=200, deadline=None)
@given(campaigns)
def test_swapping_the_mode_mirrors_the_verdicts(values):
    """min on the values is max on their negations: same leader, same p-values, mirrored differences."""
    leader_max, by_max = compare_to_leader(values, mode="max")
    leader_min, by_min = compare_to_leader({c: [-v for v in vs] for c, vs in values.items()}, mode="min")
    assert leader_max == leader_min
    for a, b in zip(by_max, by_min, strict=True):
        assert (a.condition, a.verdict, a.seeds) == (b.condition, b.verdict, b.seeds)
        assert a.p_value == pytest.approx(b.p_value) and a.diff == pytest.approx(-b.diff)


@settings(max_examples=100, deadline=None)
@given(campaigns)
def test_against_a_fixed_reference_the_mode_flips_worse_and_better(values):
    """A comparison's verdict word depends on `mode`: "worse" under max is "better" under min."""
    leader, comparisons = compare_to_leader(values, mode="max")
    assert leader is not None
    from retrain_ray.results.significance import _verdict
    for c in comparisons:
        flipped = _verdict(c.diff, c.p_value, "min", 0.05)
        assert flipped == {"worse": "better", "undecided": "undecided", "better": "worse"}[c.verdict]
