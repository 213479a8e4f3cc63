"""Is a condition's difference from the best one significant? Welch's t-test on seed means, Holm-corrected.

Each condition is a sample of per-seed values (one number per run: e.g. its mean reward over the last
steps). `compare_to_leader` names the leader (best mean under `mode`) and compares every other condition
with it:

- **Test**: Welch's unequal-variance t-test, two-sided, on the seed values (Welch-Satterthwaite degrees
  of freedom). Not a bootstrap: a campaign has 2 to 8 seeds per condition, and a bootstrap of 2-5 values
  resamples from at most a handful of distinct means, so its interval is degenerate (with 2 seeds it has
  3 possible resampled means) and its coverage far below nominal. Welch's test is exact for normal seed
  noise, robust to unequal variances between conditions, and its t distribution accounts for how little
  2-5 seeds say about the variance.
- **Correction**: Holm's step-down over the comparisons that are tested at once. `family="all-pairs"`
  (the default) adjusts over every pair of testable conditions, not only the k-1 pairs with the leader,
  because the leader is chosen from the same data: the pair (leader, worst) is the most extreme of all
  k(k-1)/2 pairs, and adjusting it as one of k-1 understates the chance of a false difference
  (4 equal conditions of 10 seeds, simulated: 7% instead of 5%; over all pairs: 3.5%). With all pairs
  in the family, Holm (valid under any dependence) bounds the chance of any false verdict by `alpha`.
  `family="leader"` adjusts over the k-1 comparisons with the leader only (more power, no such bound).
- **CI**: the 95% Welch interval of the difference, *not* adjusted for multiplicity (it describes the
  size of the difference; the verdict comes from the adjusted p-value).
- **Verdict**: "worse" / "better" when the adjusted p-value is below `alpha` and the difference points
  that way under `mode` ("worse" means worse than the leader), else "undecided".
- **Few seeds**: a comparison where either side has fewer than 2 finite values cannot estimate a
  variance: p = 1, CI (-inf, inf), "undecided", and it is left out of the Holm family (it is not
  tested). Two sides with zero variance and equal means: p = 1, CI (d, d) with d = 0; with zero
  variance and different means the difference is certain (p = 0). Non-finite values (a run whose
  metric is NaN) are dropped before anything else.

The t distribution is computed here (regularised incomplete beta by Lentz's continued fraction), so
this module needs neither NumPy nor SciPy; `tests/results/test_significance.py` checks it against tabulated values.
`ci95_halfwidth` gives the summaries' 95% Student-t interval of one condition's mean.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import Literal

Verdict = Literal["better", "worse", "undecided"]
Mode = Literal["max", "min"]
Family = Literal["all-pairs", "leader"]


@dataclass(frozen=True)
class PairComparison:
    """`condition` against `reference` (the leader): diff = mean(condition) - mean(reference), its 95%
    Welch CI (unadjusted), the Holm-adjusted two-sided p-value and the verdict at `alpha`."""

    condition: str
    reference: str
    diff: float
    ci_low: float
    ci_high: float
    p_value: float
    verdict: Verdict
    seeds: int
    reference_seeds: int
    test: str = "welch-holm"
    raw_p_value: float = 1.0
    t: float = 0.0
    df: float = float("nan")

    def describe(self) -> str:
        """One line: `grpo+zero: worse than grpo+none by -0.31 (95% CI -0.45..-0.17), p=0.004 (welch-holm), 3 vs 3 seeds`."""
        relation = {"worse": "worse than", "better": "better than", "undecided": "undecided vs"}[self.verdict]
        return (f"{self.condition}: {relation} {self.reference} by {self.diff:+.4g} "
                f"(95% CI {self.ci_low:+.4g}..{self.ci_high:+.4g}), p={self.p_value:.3g} ({self.test}), "
                f"{self.seeds} vs {self.reference_seeds} seeds")


@dataclass(frozen=True)
class WelchTest:
    diff: float
    t: float
    df: float
    p_value: float
    ci_low: float
    ci_high: float


# ---- the t distribution -------------------------------------------------------------------------------

def _beta_continued_fraction(a: float, b: float, x: float) -> float:
    """Lentz's continued fraction for the incomplete beta (Numerical Recipes 6.4, `betacf`)."""
    tiny, eps = 1e-300, 1e-15
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        for numerator in (m * (b - m) * x / ((a + m2 - 1) * (a + m2)),
                          -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1))):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < eps:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """The regularised incomplete beta function I_x(a, b) for a, b > 0 and 0 <= x <= 1."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _beta_continued_fraction(a, b, x) / a
    return 1.0 - math.exp(log_front) * _beta_continued_fraction(b, a, 1.0 - x) / b


def t_sf2(t: float, df: float) -> float:
    """Two-sided tail probability P(|T| >= |t|) of Student's t with `df` (real, > 0) degrees of freedom."""
    if math.isinf(t):
        return 0.0
    return betainc(df / 2.0, 0.5, df / (df + t * t))


def t_cdf(t: float, df: float) -> float:
    half_tail = t_sf2(t, df) / 2.0
    return 1.0 - half_tail if t >= 0 else half_tail


def t_pdf(t: float, df: float) -> float:
    log_norm = math.lgamma((df + 1.0) / 2.0) - math.lgamma(df / 2.0) - 0.5 * math.log(df * math.pi)
    return math.exp(log_norm - (df + 1.0) / 2.0 * math.log1p(t * t / df))


def t_quantile(q: float, df: float) -> float:
    """The `q` quantile of Student's t (0 < q < 1) by Newton's method from 0: for q > 1/2 the CDF is
    concave on [0, inf), so every iterate stays below the root and rises to it monotonically."""
    if not 0.0 < q < 1.0:
        raise ValueError(f"q={q}: expected 0 < q < 1")
    if q < 0.5:
        return -t_quantile(1.0 - q, df)
    t = 0.0
    for _ in range(200):
        step = (q - t_cdf(t, df)) / t_pdf(t, df)
        t += step
        if step < 1e-12 * max(1.0, t):
            break
    return t


# ---- Welch and Holm -----------------------------------------------------------------------------------

def _mean_var(values: Sequence[float]) -> tuple[float, float]:
    n = len(values)
    mean = math.fsum(values) / n
    return mean, math.fsum((v - mean) ** 2 for v in values) / (n - 1)


def welch(a: Sequence[float], b: Sequence[float], *, confidence: float | None = 0.95) -> WelchTest:
    """Welch's two-sided t-test of mean(a) - mean(b); both sides need at least 2 values. The CI is
    left out (NaN) with `confidence=None` (it costs a quantile; the Holm family needs only p)."""
    if len(a) < 2 or len(b) < 2:
        raise ValueError(f"Welch's test needs at least 2 values per side, got {len(a)} and {len(b)}")
    mean_a, var_a = _mean_var(a)
    mean_b, var_b = _mean_var(b)
    diff = mean_a - mean_b
    se2_a, se2_b = var_a / len(a), var_b / len(b)
    se2 = se2_a + se2_b
    if se2 == 0.0:
        p_value = 1.0 if diff == 0.0 else 0.0
        t = 0.0 if diff == 0.0 else math.copysign(math.inf, diff)
        return WelchTest(diff, t, math.inf, p_value, diff, diff)
    se = math.sqrt(se2)
    share_a, share_b = se2_a / se2, se2_b / se2   # shares, so tiny variances do not underflow when squared
    df = 1.0 / (share_a * share_a / (len(a) - 1) + share_b * share_b / (len(b) - 1))
    t = diff / se
    half = math.nan if confidence is None else t_quantile(0.5 + confidence / 2.0, df) * se
    return WelchTest(diff, t, df, t_sf2(t, df), diff - half, diff + half)


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the input's order: the i-th smallest p becomes
    max over j <= i of min(1, (m - j + 1) p_(j)). Reject where adjusted p < alpha."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [1.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


# ---- conditions against the leader --------------------------------------------------------------------

def _finite(values: Sequence[float | None]) -> list[float]:
    return [float(v) for v in values if v is not None and math.isfinite(float(v))]


def leader_of(values_by_condition: Mapping[str, Sequence[float]], mode: Mode = "max") -> str | None:
    """The condition with the best mean under `mode` (first one on ties), or None if none has a value."""
    finite = {c: _finite(v) for c, v in values_by_condition.items()}
    means = {c: math.fsum(v) / len(v) for c, v in finite.items() if v}
    if not means:
        return None
    sign = 1.0 if mode == "max" else -1.0
    return max(means, key=lambda c: sign * means[c])


def _verdict(diff: float, p_value: float, mode: Mode, alpha: float) -> Verdict:
    if p_value >= alpha or diff == 0.0:
        return "undecided"
    better = diff > 0 if mode == "max" else diff < 0
    return "better" if better else "worse"


def compare_to_leader(values_by_condition: Mapping[str, Sequence[float]], *, mode: Mode = "max",
                      alpha: float = 0.05, family: Family = "all-pairs",
                      ) -> tuple[str | None, tuple[PairComparison, ...]]:
    """The leader (None if no condition has a value) and one comparison per other condition, in the
    mapping's order. p-values are Holm-adjusted over `family` (see the module docstring); a side with
    fewer than 2 finite values gives an untested, "undecided" comparison with p = 1."""
    if mode not in ("max", "min"):
        raise ValueError(f"mode={mode!r}: expected 'max' or 'min'")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha={alpha}: expected 0 < alpha < 1")
    values = {c: _finite(v) for c, v in values_by_condition.items()}
    leader = leader_of(values, mode)
    if leader is None:
        return None, ()
    tests = _family_tests(values, leader, family)
    adjusted = dict(zip(tests, holm([t.p_value for t in tests.values()]), strict=True))
    out: list[PairComparison] = []
    for cond, vals in values.items():
        if cond == leader:
            continue
        test = tests.get((cond, leader))
        if test is None:
            out.append(PairComparison(cond, leader, _mean_diff(vals, values[leader]), -math.inf, math.inf,
                                      1.0, "undecided", len(vals), len(values[leader])))
            continue
        p_value = adjusted[(cond, leader)]
        out.append(PairComparison(cond, leader, test.diff, test.ci_low, test.ci_high, p_value,
                                  _verdict(test.diff, p_value, mode, alpha), len(vals), len(values[leader]),
                                  raw_p_value=test.p_value, t=test.t, df=test.df))
    return leader, tuple(out)


def _family_tests(values: Mapping[str, list[float]], leader: str, family: Family,
                  ) -> dict[tuple[str, str], WelchTest]:
    """Welch's test of every testable pair in the family, keyed (condition, other); pairs with the
    leader are keyed (condition, leader)."""
    testable = [c for c, v in values.items() if len(v) >= 2]
    if family == "leader":
        pairs = [(c, leader) for c in testable if c != leader and leader in testable]
    elif family == "all-pairs":
        pairs = [(b, a) if a == leader else (a, b) for a, b in combinations(testable, 2)]
    else:
        raise ValueError(f"family={family!r}: expected 'all-pairs' or 'leader'")
    return {(a, b): welch(values[a], values[b], confidence=0.95 if b == leader else None) for a, b in pairs}


def _mean_diff(a: list[float], b: list[float]) -> float:
    if not a or not b:
        return math.nan
    return math.fsum(a) / len(a) - math.fsum(b) / len(b)


# Two-sided 95% Student t quantiles for 1..30 degrees of freedom; 1.96 beyond.
_T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
        2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
        2.045, 2.042)


def t95(dof: int) -> float:
    return _T95[dof - 1] if 1 <= dof <= len(_T95) else 1.96


def ci95_halfwidth(values: list[float]) -> float:
    """Half-width of the 95% confidence interval of the mean; NaN with fewer than two values."""
    n = len(values)
    if n < 2:
        return float("nan")
    mean = sum(values) / n
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    return t95(n - 1) * std / math.sqrt(n)
