"""`CampaignResults`: a campaign's outcome read back from its directory (manifest + Arrow logs).

    res = CampaignResults.from_dir("logs/smoke-campaign")
    res.get_dataframe()                 # one row per run: condition, seed, status, last_*/best_*
    res.summary(by="condition")         # mean, std, 95% CI across seeds (Student t)
    res.get_best_result("mean_reward", mode="max")
    res.history("grpo+none_s1")         # every step of one run, once
    res.errors                          # {run_name: error} of failed runs

Rows come from the recorder's Arrow streams, de-duplicated on (run, step) when read.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pandas as pd

from retrain_ray.campaign.manifest import read_manifest

SUMMARY_METRICS = ("mean_reward", "correct_rate", "loss", "tokens_per_second", "step_time_s")
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


@dataclass(frozen=True)
class RunResult:
    run_name: str
    condition: str
    seed: int
    status: str
    attempts: int
    metrics: dict[str, Any] = field(default_factory=dict)
    error: str = ""


def read_history(run_dir: Path) -> pd.DataFrame:
    """Every step of one run, once (last write wins), sorted by step; empty if nothing was logged."""
    if not any(Path(run_dir).glob("metrics*.arrows")):
        return pd.DataFrame()
    from retrain_ray.logs import read_stream

    return read_stream(run_dir, name="metrics").to_pandas()


class CampaignResults:
    def __init__(self, campaign_dir: Path, manifest: dict[str, Any]) -> None:
        self.campaign_dir = campaign_dir
        self.manifest = manifest
        self._history: dict[str, pd.DataFrame] = {}

    @classmethod
    def from_dir(cls, campaign_dir: str | Path) -> CampaignResults:
        campaign_dir = Path(campaign_dir)
        return cls(campaign_dir, read_manifest(campaign_dir))

    @property
    def runs(self) -> list[dict[str, Any]]:
        return self.manifest["runs"]

    def history(self, run_name: str) -> pd.DataFrame:
        if run_name not in self._history:
            entry = next((r for r in self.runs if r["run_name"] == run_name), None)
            if entry is None:
                raise KeyError(f"no run {run_name!r} in {self.campaign_dir}; runs: {[r['run_name'] for r in self.runs]}")
            self._history[run_name] = read_history(self.campaign_dir / "runs" / run_name)
        return self._history[run_name]

    @property
    def errors(self) -> dict[str, str]:
        return {r["run_name"]: r.get("error") or "failed" for r in self.runs if r["status"] == "failed"}

    def _run_row(self, entry: dict[str, Any]) -> dict[str, Any]:
        row = {k: entry.get(k) for k in ("run_name", "condition", "seed", "status", "attempts")}
        row.update({f"override.{k}": v for k, v in (entry.get("overrides") or {}).items()})
        hist = self.history(entry["run_name"])
        row["steps_logged"] = len(hist)
        row["last_step"] = int(hist["step"].max()) if len(hist) else -1
        for m in SUMMARY_METRICS:
            if m in hist and len(hist):
                col = hist[m].dropna()
                row[f"first_{m}"] = float(col.iloc[0]) if len(col) else float("nan")
                row[f"last_{m}"] = float(col.iloc[-1]) if len(col) else float("nan")
                row[f"best_{m}"] = float(col.min() if m in ("loss", "step_time_s") else col.max()) if len(col) else float("nan")
        return row

    def get_dataframe(self) -> pd.DataFrame:
        """One row per run: condition, seed, overrides, status, attempts, first_*, last_* and best_* metrics."""
        return pd.DataFrame([self._run_row(r) for r in self.runs])

    def summary(self, by: str = "condition", metrics: tuple[str, ...] | None = None) -> pd.DataFrame:
        """Per group (default: condition): n, and mean / std / ci95 of each run's last value."""
        df = self.get_dataframe()
        cols = [f"last_{m}" for m in (metrics or SUMMARY_METRICS) if f"last_{m}" in df]
        out = []
        for key, group in df.groupby(by, sort=False):
            row: dict[str, Any] = {by: key, "runs": len(group), "failed": int((group["status"] == "failed").sum())}
            for c in cols:
                vals = [float(v) for v in group[c].dropna()]
                name = c.removeprefix("last_")
                row[f"{name}_mean"] = sum(vals) / len(vals) if vals else float("nan")
                row[f"{name}_std"] = pd.Series(vals).std() if len(vals) > 1 else float("nan")
                row[f"{name}_ci95"] = ci95_halfwidth(vals)
            out.append(row)
        return pd.DataFrame(out)

    def get_best_result(self, metric: str = "mean_reward", mode: Literal["max", "min"] = "max") -> RunResult:
        """The run whose last value of `metric` is best (failed runs included if they logged it)."""
        if mode not in ("max", "min"):
            raise ValueError(f"mode={mode!r}: expected 'max' or 'min'")
        df = self.get_dataframe()
        col = f"last_{metric}"
        if col not in df or df[col].dropna().empty:
            raise ValueError(f"metric {metric!r} was not logged by any run of {self.campaign_dir}")
        idx = df[col].idxmax() if mode == "max" else df[col].idxmin()
        entry = self.runs[int(idx)]
        last = {m: df.loc[idx, c] for c in df.columns if c.startswith("last_") for m in [c.removeprefix("last_")]}
        return RunResult(entry["run_name"], entry["condition"], entry["seed"], entry["status"],
                         entry.get("attempts", 0), last, entry.get("error", ""))
