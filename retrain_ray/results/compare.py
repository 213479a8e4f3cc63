"""Comparing two runs, or two conditions of a campaign (`retrain-ray diff`, spec 11).

A side is a list of metric histories (one per run; a condition has one per seed). For each side:
final metrics (last logged value, mean over runs), performance (mean tokens/s and step time), wall
time (sum of step times, mean over runs) and the correct-rate curve at fixed fractions of the run.
`delta` is b - a for every number both sides have.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import cast

import pandas as pd

from retrain_ray.results.campaign_results import CampaignResults, read_history

FINAL_METRICS = ("mean_reward", "correct_rate", "running_correct_rate", "loss")
PERF_METRICS = ("tokens_per_second", "step_time_s")
CURVE_FRACTIONS = (0.25, 0.5, 0.75, 1.0)


def _mean(values: Sequence[float | None]) -> float:
    finite = [v for v in values if v is not None and math.isfinite(v)]
    return sum(finite) / len(finite) if finite else float("nan")


def _last(hist: pd.DataFrame, metric: str) -> float:
    if metric not in hist:
        return float("nan")
    col = hist[metric].dropna()
    return float(col.iloc[-1]) if len(col) else float("nan")


def _at_fraction(hist: pd.DataFrame, metric: str, fraction: float) -> float:
    """The metric at the logged step closest to `fraction` of the run's last step."""
    if metric not in hist or hist[metric].dropna().empty:
        return float("nan")
    rows = hist.dropna(subset=[metric])
    target = fraction * float(rows["step"].max())
    nearest = (rows["step"] - target).abs().idxmin()
    return float(rows[metric].loc[nearest])


def summarize_side(histories: list[pd.DataFrame], label: str) -> dict[str, object]:
    """Numbers of one side (one run, or the seeds of one condition) of a diff."""
    usable = [h for h in histories if len(h)]
    perf_col = {m: [float(h[m].dropna().mean()) for h in usable if m in h and h[m].notna().any()]
                for m in PERF_METRICS}
    return {
        "label": label,
        "runs": len(histories),
        "steps": _mean([float(h["step"].max() + 1) for h in usable]),
        "final": {m: _mean([_last(h, m) for h in usable]) for m in FINAL_METRICS},
        "performance": {f"mean_{m}": _mean(perf_col[m]) for m in PERF_METRICS},
        "wall_time_s": _mean([float(h["step_time_s"].sum()) for h in usable if "step_time_s" in h]),
        "correct_rate_curve": {f"{int(f * 100)}%": _mean([_at_fraction(h, "correct_rate", f) for h in usable])
                               for f in CURVE_FRACTIONS},
    }


def _delta(a: Mapping[str, object], b: Mapping[str, object]) -> dict[str, object]:
    out: dict[str, object] = {}
    for key, va in a.items():
        vb = b.get(key)
        if isinstance(va, dict) and isinstance(vb, dict):  # a nested group of numbers (JSON-like)
            out[key] = _delta(cast(dict[str, object], va), cast(dict[str, object], vb))
        elif isinstance(va, (int, float)) and isinstance(vb, (int, float)) and key != "runs":
            out[key] = vb - va
    return out


def diff_sides(a: dict[str, object], b: dict[str, object]) -> dict[str, object]:
    return {"a": a, "b": b, "delta": _delta(a, b)}


def run_history(run_dir: Path) -> pd.DataFrame:
    """A run's metric rows; FileNotFoundError naming the directory when it has none."""
    hist = read_history(run_dir)
    if not len(hist):
        raise FileNotFoundError(f"{run_dir} holds no metrics*.arrows: is it a run directory of retrain-ray?")
    return hist


def diff_runs(run_a: Path, run_b: Path) -> dict[str, object]:
    return diff_sides(summarize_side([run_history(run_a)], str(run_a)),
                      summarize_side([run_history(run_b)], str(run_b)))


def diff_conditions(campaign_dir: Path, cond_a: str, cond_b: str) -> dict[str, object]:
    """Compares two conditions of a campaign over their seeds; KeyError naming the known labels."""
    results = CampaignResults.from_dir(campaign_dir)
    labels = list(results.manifest.conditions)
    sides: list[dict[str, object]] = []
    for cond in (cond_a, cond_b):
        if cond not in labels:
            raise KeyError(f"no condition {cond!r} in {campaign_dir}; conditions: {', '.join(labels)}")
        names = [r.run_name for r in results.runs if r.condition == cond]
        sides.append(summarize_side([results.history(n) for n in names], cond))
    return diff_sides(*sides)
