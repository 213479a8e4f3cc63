"""Results as deep-RL papers report them (Agarwal et al., NeurIPS 2021; the `rliable` library): per
condition the mean and the interquartile mean with stratified bootstrap intervals, per pair the
probability of improvement with its interval, and performance profiles. Pure NumPy, no I/O.

**Scores.** A condition's scores are one number per run (a 1-D sequence), or a runs x tasks matrix
when each run is scored on several tasks (rliable's layout). Non-finite scores are an error: drop the
runs whose metric is NaN before calling.

**IQM** (`iqm`): rliable's definition, `scipy.stats.trim_mean(scores, 0.25, axis=None)`: sort all the
scores (runs x tasks flattened), drop `floor(n / 4)` from each end, average the rest. When `n` is not a
multiple of 4 this keeps more than half of the scores (n = 5: the middle 3). `fractional=True` gives
the interpolated form instead: exactly the middle 50% of the empirical distribution, the two end scores
weighted by the fraction of them inside it (n = 5: the middle half is [1.25, 3.75) in rank units, so
weights 0.75, 1, 0.75 over the middle 3, divided by 2.5).
The default follows rliable so that the figures agree with papers that use it.

**Intervals**: stratified bootstrap, percentile method (rliable's default): each condition is resampled
on its own, and within it each task's runs (a column) with replacement, `reps` times; the interval is
the (1 - confidence) / 2 and (1 + confidence) / 2 percentiles (NumPy's linear interpolation) of the
statistic over the resamples. Seeded (`seed`), reproducible, and exactly invariant to the order of the
runs and of the conditions: each task's scores are sorted before resampling and every condition draws
from its own generator seeded with `seed`. With 2-3 runs a bootstrap interval is coarse (3 runs have 10
distinct resamples): it describes the runs, it is not a test (results/significance.py is).

**Probability of improvement** `P(X > Y)`: the Mann-Whitney form, the chance that a run of X scores
above a run of Y, ties counted half, averaged over tasks (rliable's `probability_of_improvement`);
`P(X > Y) + P(Y > X) = 1`. Its interval resamples X and Y independently (stratified by task).

**Performance profile**: at each threshold `tau`, the fraction of scores above `tau` (strictly, as
rliable's score distribution), with a bootstrap band: data a plot draws as a step curve.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import permutations
from typing import Literal

import numpy as np
import numpy.typing as npt
import pandas as pd

FloatArray = npt.NDArray[np.float64]
Scores = Sequence[float] | Sequence[Sequence[float]] | FloatArray

DEFAULT_REPS = 50_000
DEFAULT_CONFIDENCE = 0.95


@dataclass(frozen=True)
class Interval:
    """A point estimate and its bootstrap interval at `confidence`."""

    estimate: float
    low: float
    high: float
    confidence: float = DEFAULT_CONFIDENCE


@dataclass(frozen=True)
class ConditionStats:
    """A condition's mean and IQM with their intervals over `runs` runs (x `tasks` tasks)."""

    condition: str
    runs: int
    tasks: int
    mean: Interval
    iqm: Interval


@dataclass(frozen=True)
class Improvement:
    """P(`condition` > `other`): the chance that a run of `condition` scores above a run of `other`."""

    condition: str
    other: str
    probability: Interval


@dataclass(frozen=True)
class PerformanceProfile:
    """The fraction of `condition`'s scores above each threshold, with its bootstrap band."""

    condition: str
    thresholds: tuple[float, ...]
    fraction: tuple[float, ...]
    low: tuple[float, ...]
    high: tuple[float, ...]


def as_matrix(scores: Scores) -> FloatArray:
    """Scores as a runs x tasks float matrix (a 1-D sequence is one task); at least one run, all finite."""
    matrix = np.asarray(scores, dtype=np.float64)
    if matrix.ndim == 1:
        matrix = matrix[:, np.newaxis]
    if matrix.ndim != 2 or matrix.shape[0] < 1 or matrix.shape[1] < 1:
        raise ValueError(f"scores of shape {matrix.shape}: expected runs, or runs x tasks, with at least one run")
    if not np.all(np.isfinite(matrix)):
        raise ValueError("scores hold NaN or infinity: drop the runs without a finite metric first")
    return matrix


def iqm_weights(n: int, *, fractional: bool = False) -> FloatArray:
    """The weights of the sorted scores whose weighted sum is the IQM of `n` scores (an L-estimator)."""
    if n < 1:
        raise ValueError(f"n={n}: the IQM needs at least one score")
    if not fractional:
        cut = n // 4
        weights = np.zeros(n)
        weights[cut:n - cut] = 1.0 / (n - 2 * cut)
        return weights
    # score i covers [i, i+1) of [0, n); keep its overlap with the middle half [n/4, 3n/4)
    starts = np.arange(n, dtype=np.float64)
    overlap = np.clip(np.minimum(starts + 1.0, 0.75 * n) - np.maximum(starts, 0.25 * n), 0.0, 1.0)
    return overlap / overlap.sum()


def iqm(scores: Scores, *, fractional: bool = False) -> float:
    """The interquartile mean of all the scores (runs x tasks flattened); see the module docstring."""
    flat = np.sort(as_matrix(scores).ravel())
    return float(flat @ iqm_weights(flat.size, fractional=fractional))


def probability_of_improvement(x: Scores, y: Scores) -> float:
    """P(X > Y) + P(X = Y) / 2 over all pairs of runs, per task, averaged over tasks (same tasks in both)."""
    return float(_improvement(as_matrix(x)[np.newaxis], _same_tasks(as_matrix(x), as_matrix(y))[np.newaxis])[0])


def condition_stats(scores_by_condition: Mapping[str, Scores], *, reps: int = DEFAULT_REPS,
                    confidence: float = DEFAULT_CONFIDENCE, seed: int = 0,
                    fractional: bool = False) -> dict[str, ConditionStats]:
    """Each condition's mean and IQM with stratified bootstrap percentile intervals."""
    out: dict[str, ConditionStats] = {}
    for condition, scores in scores_by_condition.items():
        matrix = _canonical(as_matrix(scores))
        samples = _resample(matrix, reps, np.random.default_rng(seed))
        weights = iqm_weights(matrix.size, fractional=fractional)
        flat = samples.reshape(reps, -1)
        out[condition] = ConditionStats(
            condition, matrix.shape[0], matrix.shape[1],
            mean=_interval(float(matrix.mean()), flat.mean(axis=1), confidence),
            iqm=_interval(float(np.sort(matrix.ravel()) @ weights), np.sort(flat, axis=1) @ weights, confidence))
    return out


def improvements(scores_by_condition: Mapping[str, Scores], *, pairs: Sequence[tuple[str, str]] | None = None,
                 reps: int = DEFAULT_REPS, confidence: float = DEFAULT_CONFIDENCE,
                 seed: int = 0) -> list[Improvement]:
    """P(X > Y) with its interval for each pair (X, Y): `pairs`, or every ordered pair of conditions."""
    matrices = {c: _canonical(as_matrix(s)) for c, s in scores_by_condition.items()}
    chosen = list(pairs) if pairs is not None else list(permutations(matrices, 2))
    out: list[Improvement] = []
    for x, y in chosen:
        mx, my = matrices[x], _same_tasks(matrices[x], matrices[y])
        boot = _resampled_improvement(mx, my, reps, np.random.default_rng(seed))
        out.append(Improvement(x, y, _interval(probability_of_improvement(mx, my), boot, confidence)))
    return out


def performance_profiles(scores_by_condition: Mapping[str, Scores], thresholds: Sequence[float], *,
                         reps: int = DEFAULT_REPS, confidence: float = DEFAULT_CONFIDENCE,
                         seed: int = 0) -> dict[str, PerformanceProfile]:
    """Each condition's fraction of scores above each threshold (averaged over tasks), with its band."""
    taus = np.asarray(thresholds, dtype=np.float64)
    out: dict[str, PerformanceProfile] = {}
    for condition, scores in scores_by_condition.items():
        matrix = _canonical(as_matrix(scores))
        samples = _resample(matrix, reps, np.random.default_rng(seed))
        point = _fraction_above(matrix[np.newaxis], taus)[0]
        boot = _fraction_above(samples, taus)
        alpha = (1.0 - confidence) / 2.0
        low, high = np.percentile(boot, [100.0 * alpha, 100.0 * (1.0 - alpha)], axis=0)
        out[condition] = PerformanceProfile(condition, tuple(float(t) for t in taus), _floats(point),
                                            _floats(low), _floats(high))
    return out


def _canonical(matrix: FloatArray) -> FloatArray:
    """Each task's runs sorted: resampling a sorted column makes the result independent of run order."""
    return np.sort(matrix, axis=0)


def _same_tasks(x: FloatArray, y: FloatArray) -> FloatArray:
    if x.shape[1] != y.shape[1]:
        raise ValueError(f"{x.shape[1]} tasks against {y.shape[1]}: compare conditions on the same tasks")
    return y


def _resample(matrix: FloatArray, reps: int, rng: np.random.Generator) -> FloatArray:
    """`reps` stratified resamples (reps x runs x tasks): each task's runs drawn with replacement."""
    if reps < 1:
        raise ValueError(f"reps={reps}: expected at least 1")
    runs, tasks = matrix.shape
    rows = rng.integers(0, runs, size=(reps, runs, tasks))
    return np.take_along_axis(np.broadcast_to(matrix, (reps, runs, tasks)), rows, axis=1)


def _resampled_improvement(x: FloatArray, y: FloatArray, reps: int, rng: np.random.Generator) -> FloatArray:
    """`_improvement(_resample(x, reps, rng), _resample(y, reps, rng))`, the same draws and the same figures
    to the last bit, without sorting every resample: a resample is how often it drew each run, so its
    Mann-Whitney count is `counts_x @ above @ counts_y` with `above[i, j]` = 1 when run i of X beats run j of
    Y, 1/2 on a tie (every term a multiple of 1/2: the sums are exact in any order). At 200 runs a condition
    and 10,000 resamples it took a quarter of the ranks' time (`results` on a 1,000-run campaign)."""
    if reps < 1:
        raise ValueError(f"reps={reps}: expected at least 1")
    (n, tasks), m = x.shape, y.shape[0]
    rows_x = rng.integers(0, n, size=(reps, n, tasks))
    rows_y = rng.integers(0, m, size=(reps, m, tasks))
    u = np.empty((reps, tasks), dtype=np.float64)
    for task in range(tasks):
        xs, ys = x[:, task, np.newaxis], y[np.newaxis, :, task]
        above = (xs > ys) + 0.5 * (xs == ys)
        u[:, task] = ((_draw_counts(rows_x[:, :, task], n) @ above) * _draw_counts(rows_y[:, :, task], m)).sum(axis=1)
    return (u / (n * m)).mean(axis=1)


def _draw_counts(rows: npt.NDArray[np.int64], size: int) -> FloatArray:
    """Per resample (axis 0), how many times it drew each of `size` runs."""
    reps = rows.shape[0]
    flat = (rows + np.arange(reps, dtype=np.int64)[:, np.newaxis] * size).ravel()
    return np.bincount(flat, minlength=reps * size).reshape(reps, size).astype(np.float64)


def _improvement(x: FloatArray, y: FloatArray) -> FloatArray:
    """Per resample (axis 0): the Mann-Whitney P(X > Y) of each task, averaged over tasks.

    From the runs' average ranks in X and Y together (U = X's rank sum - n(n+1)/2, ties ranked half), which
    is the pairwise count (X above Y, ties half) without making the n x m comparisons of every resample."""
    n, m = x.shape[1], y.shape[1]
    ranks = _average_ranks(np.concatenate([x, y], axis=1))
    u = ranks[:, :n, :].sum(axis=1) - n * (n + 1) / 2.0
    return (u / (n * m)).mean(axis=1)


def _average_ranks(z: FloatArray) -> FloatArray:
    """The 1-based ranks of z along axis 1, tied values sharing their mean rank (as scipy's rankdata)."""
    order = np.argsort(z, axis=1, kind="stable")
    ordered = np.take_along_axis(z, order, axis=1)
    size = z.shape[1]
    position: npt.NDArray[np.int64] = np.arange(size, dtype=np.int64).reshape(1, size, 1)
    starts_run = np.ones(ordered.shape, dtype=bool)
    starts_run[:, 1:, :] = ordered[:, 1:, :] != ordered[:, :-1, :]
    ends_run = np.ones(ordered.shape, dtype=bool)
    ends_run[:, :-1, :] = starts_run[:, 1:, :]
    first = np.maximum.accumulate(np.where(starts_run, position, 0), axis=1)
    last = np.flip(np.minimum.accumulate(np.flip(np.where(ends_run, position, size), axis=1), axis=1), axis=1)
    ranks = np.empty(z.shape, dtype=np.float64)
    np.put_along_axis(ranks, order, (first + last) / 2.0 + 1.0, axis=1)
    return ranks


def _fraction_above(samples: FloatArray, taus: FloatArray) -> FloatArray:
    """Per resample (axis 0) and threshold: the fraction of each task's runs above it, averaged over tasks."""
    return (samples[:, :, :, np.newaxis] > taus).mean(axis=(1, 2))


def _interval(estimate: float, boot: FloatArray, confidence: float) -> Interval:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence={confidence}: expected 0 < confidence < 1")
    alpha = (1.0 - confidence) / 2.0
    low, high = np.percentile(boot, [100.0 * alpha, 100.0 * (1.0 - alpha)])
    return Interval(estimate, float(low), float(high), confidence)


def _floats(values: FloatArray) -> tuple[float, ...]:
    return tuple(float(v) for v in values)


# A campaign's robust statistics as tables: per condition the mean and the IQM with stratified bootstrap
# intervals, and each condition against the best as the probability of improvement with its interval
# (`results/robust_stats.py` computes them; this module shapes them for `results`, `--json` and the report).
#
# The scores are each run's value on the metric (`CampaignResults.run_values`: the mean of its last
# window of logged values). Means and IQMs are stated in the metric's own units. The probability of
# improvement is `P(best > condition)`, the chance that a run of the best condition scores better than a
# run of the other; for a lower-is-better metric the scores are negated first, so "better" means lower.
#
# The bootstrap is seeded (`ROBUST_SEED`): the same campaign gives the same intervals every time.
ROBUST_REPS = 10_000
ROBUST_SEED = 0
CONDITION_COLUMNS = ("condition", "runs", "mean", "mean_low", "mean_high", "iqm", "iqm_low", "iqm_high")
IMPROVEMENT_COLUMNS = ("condition", "best", "p_best_better", "p_low", "p_high")


def robust_conditions(values: Mapping[str, Sequence[float]], *, reps: int = ROBUST_REPS, seed: int = ROBUST_SEED,
                      confidence: float = DEFAULT_CONFIDENCE) -> pd.DataFrame:
    """One row per condition with a value: runs, mean and IQM with their bootstrap intervals."""
    scored = {c: list(v) for c, v in values.items() if v}
    stats = condition_stats(scored, reps=reps, seed=seed, confidence=confidence)
    rows = [{"condition": c, "runs": s.runs, **_columns("mean", s.mean), **_columns("iqm", s.iqm)}
            for c, s in stats.items()]
    return pd.DataFrame(rows, columns=list(CONDITION_COLUMNS))


def robust_improvements(values: Mapping[str, Sequence[float]], best: str | None, *,
                        mode: Literal["max", "min"] = "max", reps: int = ROBUST_REPS, seed: int = ROBUST_SEED,
                        confidence: float = DEFAULT_CONFIDENCE) -> pd.DataFrame:
    """One row per other condition: P(best > condition) with its interval (scores negated when lower is
    better); empty without a best."""
    sign = -1.0 if mode == "min" else 1.0
    scored = {c: [sign * x for x in v] for c, v in values.items() if v}
    if best is None or best not in scored:
        return pd.DataFrame(columns=list(IMPROVEMENT_COLUMNS))
    pairs = [(best, c) for c in scored if c != best]
    found = improvements(scored, pairs=pairs, reps=reps, seed=seed, confidence=confidence)
    rows = [{"condition": i.other, "best": best, "p_best_better": i.probability.estimate,
             "p_low": i.probability.low, "p_high": i.probability.high} for i in found]
    return pd.DataFrame(rows, columns=list(IMPROVEMENT_COLUMNS))


def robust_table(conditions: pd.DataFrame, versus_best: pd.DataFrame) -> pd.DataFrame:
    """For a person: condition, runs, "mean [low, high]", "IQM [low, high]", "P(best better) [low, high]"."""
    by_condition = {str(r["condition"]): r for r in versus_best.to_dict("records")}
    rows: list[dict[str, object]] = []
    for row in conditions.to_dict("records"):
        pair = by_condition.get(str(row["condition"]))
        rows.append({"condition": row["condition"], "runs": row["runs"],
                     "mean [95% CI]": _bracket(row["mean"], row["mean_low"], row["mean_high"]),
                     "IQM [95% CI]": _bracket(row["iqm"], row["iqm_low"], row["iqm_high"]),
                     "P(best better) [95% CI]": "best" if pair is None else
                     _bracket(pair["p_best_better"], pair["p_low"], pair["p_high"])})
    return pd.DataFrame(rows, columns=["condition", "runs", "mean [95% CI]", "IQM [95% CI]",
                                       "P(best better) [95% CI]"])


def _columns(name: str, interval: Interval) -> dict[str, float]:
    return {name: interval.estimate, f"{name}_low": interval.low, f"{name}_high": interval.high}


def _bracket(estimate: float, low: float, high: float) -> str:
    return f"{estimate:.4g} [{low:.4g}, {high:.4g}]"
