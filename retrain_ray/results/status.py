"""Live campaign status: a condition x seed matrix read from the manifest and the Arrow logs.

Cells: "step/max" (running or pending), "step ✓" (completed), "step ✗" (failed), "step stale"
(not finished, no new row for `stale_after_s`), "—" (no row yet), "missing" (the manifest says
the run finished but its directory is gone: deleted or moved). Unlike the
original (hazard 13.6) failed runs are counted, from the manifest's run status.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import TypedDict, cast

import pandas as pd

from retrain_ray.logs.manifest import RunRecord, read_manifest
from retrain_ray.results.campaign_results import read_history, run_status

STALE_AFTER_S = 300.0


class RunState(TypedDict):
    """One run in `campaign_status` (JSON-able: `retrain-ray status --json` prints it)."""

    run_name: str
    condition: str
    seed: int
    status: str  # the manifest's, or "missing" / "stale"
    step: int | None  # last logged step (None: no row yet)
    max_steps: int | None
    attempts: int
    mean_reward: float | None
    correct_rate: float | None
    reward_sparkline: str
    seconds_per_step: float | None
    eta_s: float | None


class CampaignStatus(TypedDict):
    campaign: str
    dir: str
    status: str
    counts: dict[str, int]
    seeds: list[int]
    matrix: dict[str, dict[str, str]]  # condition -> seed -> cell
    runs: list[RunState]
    eta_s: float | None
SPARK = "▁▂▃▄▅▆▇█"
SPARK_POINTS = 24
ETA_WINDOW = 10  # recent rows whose wall-clock spacing estimates the time per step


def sparkline(values: list[float]) -> str:
    """One block character per value, scaled between the values' min and max."""
    values = [v for v in values if v == v]  # drop NaN
    if not values:
        return ""
    low, high = min(values), max(values)
    span = high - low
    return "".join(SPARK[int((v - low) / span * (len(SPARK) - 1)) if span else 0] for v in values)


def seconds_per_step(hist: pd.DataFrame) -> float | None:
    """Median wall-clock time between the last `ETA_WINDOW` logged steps (None with < 2 rows)."""
    if len(hist) < 2 or "wall_time" not in hist:
        return None
    recent = hist.tail(ETA_WINDOW + 1)
    seconds = pd.to_datetime(recent["wall_time"]).diff().dt.total_seconds().dropna()
    steps = recent["step"].astype(float).diff().dropna()
    per_step = [s / k for s, k in zip(seconds, steps, strict=True) if k > 0]
    return statistics.median(per_step) if per_step else None


def _last_row_time(run_dir: Path) -> float:
    files = list(run_dir.glob("metrics*.arrows"))
    return max((f.stat().st_mtime for f in files), default=0.0)


def run_state(entry: RunRecord, run_dir: Path, now: float, stale_after_s: float) -> RunState:
    hist = read_history(run_dir)
    step = int(hist["step"].max()) if len(hist) else None
    status = run_status(entry, run_dir)
    if status == "running" and step is not None and now - _last_row_time(run_dir) > stale_after_s:
        status = "stale"
    per_step = seconds_per_step(hist)
    rewards = [float(v) for v in hist["mean_reward"].tail(SPARK_POINTS)] if "mean_reward" in hist else []
    return RunState(
        run_name=entry.run_name, condition=entry.condition, seed=entry.seed, status=status, step=step,
        max_steps=entry.max_steps or None, attempts=entry.attempts,
        mean_reward=_last(hist, "mean_reward"), correct_rate=_last(hist, "correct_rate"),
        reward_sparkline=sparkline(rewards), seconds_per_step=per_step,
        eta_s=_run_eta(step, entry.max_steps or None, per_step) if status in ("running", "stale") else None,
    )


def _last(hist: pd.DataFrame, column: str) -> float | None:
    """The last row's value of `column` (NaN when that row has none); None with no row."""
    if not len(hist):
        return None
    return float(cast(float, hist[column].iloc[-1])) if column in hist else float("nan")


def _run_eta(step: int | None, max_steps: int | None, per_step: float | None) -> float | None:
    if step is None or max_steps is None or per_step is None:
        return None
    return max(0, int(max_steps) - 1 - step) * per_step


def cell(state: RunState) -> str:
    step, status = state["step"], state["status"]
    if status == "missing":
        return "missing"
    if step is None:
        return "✗" if status == "failed" else "—"
    shown = step + 1
    return {"completed": f"{shown} ✓", "failed": f"{shown} ✗", "stale": f"{shown} stale",
            "stopped": f"{shown} stopped"}.get(
        status, f"{shown}/{state['max_steps']}")


def campaign_status(campaign_dir: Path, *, stale_after_s: float = STALE_AFTER_S) -> CampaignStatus:
    manifest = read_manifest(campaign_dir)
    now = time.time()
    runs = [run_state(e, campaign_dir / "runs" / e.run_name, now, stale_after_s) for e in manifest.runs]
    counts = {s: sum(r["status"] == s for r in runs) for s in ("pending", "running", "stale", "completed", "failed",
                                                        "stopped", "missing")}
    seeds = list(dict.fromkeys([*manifest.seeds, *(r["seed"] for r in runs)]))  # with seeds an adaptive one added
    matrix = {c: {str(r["seed"]): cell(r) for r in runs if r["condition"] == c} for c in manifest.conditions}
    return CampaignStatus(campaign=manifest.name, dir=str(campaign_dir), status=manifest.status, counts=counts,
                          seeds=seeds, matrix=matrix, runs=runs, eta_s=campaign_eta(runs, manifest.max_concurrent))


def campaign_eta(runs: list[RunState], max_concurrent: int | None) -> float | None:
    """Seconds until the last run ends: the longest running ETA, plus the pending runs' whole length
    (max_steps x the running runs' mean time per step) spread over the concurrent slots."""
    etas = [r["eta_s"] for r in runs if r["eta_s"] is not None]
    if not etas:
        return None
    per_step = statistics.mean(r["seconds_per_step"] for r in runs if r["seconds_per_step"] is not None)
    pending = [r for r in runs if r["status"] == "pending"]
    slots = max(1, int(max_concurrent or len(etas)))
    return max(etas) + sum(per_step * (r["max_steps"] or 0) for r in pending) / slots


def find_campaigns(root: Path) -> list[Path]:
    """`root` itself if it is a campaign directory, else the campaign directories up to two levels
    below it (campaigns live in `<log_dir>/<name>`, so `status logs` finds `logs/smoke/campaign_*`)."""
    root = Path(root)
    if (root / "manifest.json").is_file():
        return [root]
    if not root.is_dir():
        return []
    found = {m.parent for pattern in ("*/manifest.json", "*/*/manifest.json") for m in root.glob(pattern)}
    return sorted(p for p in found if p.parent.name != "runs")


HIDE_IDLE_AFTER_S = 24 * 3600.0
VIEWS = ("default", "active", "all")


def idle_seconds(campaign_dir: Path, now: float) -> float:
    """Seconds since the campaign last wrote anything: its manifest or any run's metrics."""
    files = [campaign_dir / "manifest.json", *campaign_dir.glob("runs/*/metrics*.arrows")]
    newest = max((f.stat().st_mtime for f in files if f.exists()), default=0.0)
    return max(0.0, now - newest)


def visible(status: CampaignStatus, view: str, *, now: float | None = None) -> bool:
    """Whether `status` (from `campaign_status`) shows in a view, as the original's status (spec 5.3):
    `all` shows every campaign; `active` only those with a running run; the default view hides
    campaigns with no running run that have been idle for more than 24 h."""
    if view not in VIEWS:
        raise ValueError(f"view {view!r}: expected one of {VIEWS}")
    running = status["counts"]["running"] > 0
    if view == "all" or running:
        return True
    if view == "active":
        return False
    return idle_seconds(Path(status["dir"]), time.time() if now is None else now) <= HIDE_IDLE_AFTER_S
