"""A campaign's robust statistics as tables: per condition the mean and the IQM with stratified bootstrap
intervals, and each condition against the best as the probability of improvement with its interval
(`results/robust_stats.py` computes them; this module shapes them for `results`, `--json` and the report).

The scores are each run's value on the metric (`CampaignResults.run_values`: the mean of its last
window of logged values). Means and IQMs are stated in the metric's own units. The probability of
improvement is `P(best > condition)`, the chance that a run of the best condition scores better than a
run of the other; for a lower-is-better metric the scores are negated first, so "better" means lower.

The bootstrap is seeded (`ROBUST_SEED`): the same campaign gives the same intervals every time.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

import pandas as pd

from retrain_ray.results.robust_stats import DEFAULT_CONFIDENCE, Interval, condition_stats, improvements

# 10,000 resamples: intervals stable to about 0.005 on a 0..1 metric, and well under a second for a
# 20-run campaign (the pure module's 50,000 is for papers; `--reps` asks for it).
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
