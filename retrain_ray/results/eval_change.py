"""Held-out evaluation before and after training: per condition, the change's mean and 95% interval across seeds.

A run's *before* is its first eval row (step -1 with `[training] eval_at_start`, the untrained model) and its
*after* its last; a run with fewer than two eval rows at different steps has no change. The interval is the
Student-t interval of the per-seed changes (paired: each seed is compared with itself), so it says whether
training moved held-out accuracy, not how two conditions compare (`significance` does that).
"""

from __future__ import annotations

import math

import pandas as pd

from retrain_ray.results.significance import ci95_halfwidth

RUN = "run"
CHANGE_COLUMNS = ("condition", "seeds", "first_step", "last_step", "before", "after", "change", "ci95_low",
                  "ci95_high", "verdict")


def run_changes(evals: pd.DataFrame, metric: str = "eval_correct_rate") -> pd.DataFrame:
    """One row per run with two or more eval rows: run, first_step, last_step, before, after, change."""
    columns = [RUN, "first_step", "last_step", "before", "after", "change"]
    rows = evals.dropna(subset=[metric]).sort_values([RUN, "step"], kind="stable") if len(evals) else evals
    if not len(rows):
        return pd.DataFrame(columns=columns)
    by_run = rows.groupby(RUN, sort=False)
    out = pd.DataFrame({"first_step": by_run["step"].first(), "last_step": by_run["step"].last(),
                        "before": by_run[metric].first(), "after": by_run[metric].last()})
    out = out[out["last_step"] > out["first_step"]]
    out["change"] = out["after"] - out["before"]
    return out.reset_index()[columns]


def condition_changes(changes: pd.DataFrame, identity: pd.DataFrame) -> pd.DataFrame:
    """Per condition (in `identity`'s order): seeds, mean before / after / change, the change's 95% interval
    and a verdict: "rises" / "falls" when the interval excludes 0, "unclear" otherwise or with one seed."""
    condition_of = dict(zip(identity[RUN].astype(str).tolist(), identity["condition"].astype(str).tolist(),
                            strict=True))
    runs: dict[str, list[dict[str, float]]] = {c: [] for c in condition_of.values()}
    for record in changes.to_dict("records"):
        condition = condition_of.get(str(record[RUN]))
        if condition is not None:
            runs[condition].append({k: float(record[k]) for k in ("first_step", "last_step", "before", "after",
                                                                   "change")})
    rows = [_condition_row(condition, part) for condition, part in runs.items() if part]
    return pd.DataFrame(rows, columns=list(CHANGE_COLUMNS))


def _condition_row(condition: str, runs: list[dict[str, float]]) -> dict[str, object]:
    deltas = [r["change"] for r in runs]
    mean = sum(deltas) / len(deltas)
    half = ci95_halfwidth(deltas)
    low, high = (mean - half, mean + half) if not math.isnan(half) else (float("nan"), float("nan"))
    verdict = "rises" if low > 0 else "falls" if high < 0 else "unclear"
    return {"condition": condition, "seeds": len(runs), "first_step": int(min(r["first_step"] for r in runs)),
            "last_step": int(max(r["last_step"] for r in runs)),
            "before": sum(r["before"] for r in runs) / len(runs), "after": sum(r["after"] for r in runs) / len(runs),
            "change": mean, "ci95_low": low, "ci95_high": high, "verdict": verdict}
