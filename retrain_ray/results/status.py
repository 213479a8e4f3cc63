"""Live campaign status: a condition x seed matrix read from the manifest and the Arrow logs.

Cells: "step/max" (running or pending), "step ✓" (completed), "step ✗" (failed), "step stale"
(not finished, no new row for `stale_after_s`), "—" (no row yet), "missing" (the manifest says
the run finished but its directory is gone: deleted or moved). Unlike the
original (hazard 13.6) failed runs are counted, from the manifest's run status.

Standalone runs (`retrain-ray train`) are read from their Arrow logs, as the original's `retrain status`
shows them (spec 5.3): the last row's step, condition, reward, correct rate, loss, tokens/s, sample and
train time, the wall time (sum of `step_time_s`) and when the run last logged. A run directory is one
holding a `metrics.arrows` stream; runs inside a campaign directory are the campaign's (shown in its
matrix). `completed` when the run's newest checkpoint is `final` (trainer_state.json, as the original),
`stale` when not completed and nothing was logged for `stale_after_s`, else `running`.
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import dataclass
from numbers import Real
from pathlib import Path
from typing import TypedDict, cast

import pandas as pd

from retrain_ray.logs.manifest import RunRecord, read_manifest
from retrain_ray.logs.run_columns import RUN, read_run_columns
from retrain_ray.results.campaign_results import read_history, run_status

STALE_AFTER_S = 300.0


class RunState(TypedDict):
    """One run in `campaign_status` (JSON-able: `retrain-ray status --json` prints it)."""

    run_name: str
    condition: str
    seed: int
    status: str  # the manifest's, or "missing" / "stale" / "paused" (an adaptive campaign's run waiting at a rung)
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
    return _seconds_per_step_by_run(hist.assign(**{RUN: ""})).get("")


def _seconds_per_step_by_run(frame: pd.DataFrame) -> dict[str, float]:
    """`seconds_per_step` of every run of `frame` (a `run` column; each run's rows by step) in one pass;
    a run with fewer than two rows, or no step apart, is left out."""
    if len(frame) < 2 or "wall_time" not in frame:
        return {}
    recent = frame.groupby(RUN, sort=False).tail(ETA_WINDOW + 1)
    by_run = recent[RUN]
    wall = pd.to_datetime(recent["wall_time"])
    seconds = (wall - wall.min()).dt.total_seconds().groupby(by_run, sort=False).diff()
    steps = recent["step"].astype(float).groupby(by_run, sort=False).diff()
    keep = seconds.notna() & steps.notna() & (steps > 0)
    medians = (seconds[keep] / steps[keep]).groupby(by_run[keep], sort=False).median()
    return {str(run): float(value) for run, value in medians.items()}


@dataclass(frozen=True)
class LogFigures:
    """What a run's status reads of its log: last step, last row's reward and correct rate (NaN when that
    row has none), the last `SPARK_POINTS` rewards and the seconds per step."""

    step: int
    mean_reward: float
    correct_rate: float
    rewards: list[float]
    per_step: float | None


def log_figures(frame: pd.DataFrame) -> dict[str, LogFigures]:
    """`LogFigures` of every run of `frame` (`read_run_columns(..., STATUS_COLUMNS)`), in a few groupbys:
    no pass over every row in Python, so a thousand runs' status reads in seconds."""
    if frame.empty:
        return {}
    runs = frame.groupby(RUN, sort=False)
    last = frame.loc[runs.tail(1).index].set_index(RUN)
    steps = {str(k): int(v) for k, v in runs["step"].max().astype(int).items()}
    per_step = _seconds_per_step_by_run(frame)
    rewards, correct = _column_by_run(last, "mean_reward"), _column_by_run(last, "correct_rate")
    sparks: dict[str, list[float]] = {}
    if "mean_reward" in frame:
        recent = runs.tail(SPARK_POINTS)
        for run, value in zip(recent[RUN].tolist(), recent["mean_reward"].astype(float).tolist(), strict=True):
            sparks.setdefault(str(run), []).append(float(value))
    nan = float("nan")
    return {run: LogFigures(step=step, mean_reward=rewards.get(run, nan), correct_rate=correct.get(run, nan),
                            rewards=sparks.get(run, []), per_step=per_step.get(run)) for run, step in steps.items()}


def _column_by_run(frame: pd.DataFrame, column: str) -> dict[str, float]:
    """run -> `column` of `frame` (indexed by run) as floats; {} when it has no such column."""
    if column not in frame:
        return {}
    return {str(k): float(v) for k, v in frame[column].astype(float).items()}


def _last_row_time(run_dir: Path) -> float:
    files = list(run_dir.glob("metrics*.arrows"))
    return max((f.stat().st_mtime for f in files), default=0.0)


STATUS_COLUMNS = ("step", "wall_time", "mean_reward", "correct_rate")  # all a run's state reads of its log


def run_state(entry: RunRecord, run_dir: Path, now: float, stale_after_s: float,
              figures: LogFigures | None) -> RunState:
    """A run's state from its entry and its log's figures (`log_figures`; None: it logged no row)."""
    step = figures.step if figures is not None else None
    status = run_status(entry, run_dir)
    if status == "running" and isinstance(getattr(entry, "paused_at_rung", None), int):
        status = "paused"  # waits at a rung for the decision (campaign/adaptive/paused.py): quiet, not stale
    elif status == "running" and step is not None and now - _last_row_time(run_dir) > stale_after_s:
        status = "stale"
    per_step = figures.per_step if figures is not None else None
    return RunState(
        run_name=entry.run_name, condition=entry.condition, seed=entry.seed, status=status, step=step,
        max_steps=entry.max_steps or None, attempts=entry.attempts,
        mean_reward=figures.mean_reward if figures is not None else None,
        correct_rate=figures.correct_rate if figures is not None else None,
        reward_sparkline=sparkline(figures.rewards if figures is not None else []), seconds_per_step=per_step,
        eta_s=_run_eta(step, entry.max_steps or None, per_step) if status in ("running", "stale", "paused") else None,
    )


def settled_state(entry: RunRecord, run_dir: Path) -> RunState:
    """A run the manifest records pending or finished, from its entry alone (its log is not read): the
    progress line's view, which must not read every finished run's log at every redraw."""
    step = entry.last_step

    def number(key: str) -> float | None:
        value = entry.result.get(key)
        return float(value) if isinstance(value, (int, float)) else None

    return RunState(
        run_name=entry.run_name, condition=entry.condition, seed=entry.seed, status=run_status(entry, run_dir),
        step=step if step >= 0 else None, max_steps=entry.max_steps or None, attempts=entry.attempts,
        mean_reward=number("mean_reward"), correct_rate=number("correct_rate"), reward_sparkline="",
        seconds_per_step=None, eta_s=None,
    )


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
            "paused": f"{shown} paused", "stopped": f"{shown} stopped"}.get(
        status, f"{shown}/{state['max_steps']}")


def campaign_status(campaign_dir: Path, *, stale_after_s: float = STALE_AFTER_S,
                    running_only: bool = False) -> CampaignStatus:
    """`running_only`: read the logs of running runs only; the others as the manifest records them
    (`settled_state`: no sparkline or time per step), as the progress line does."""
    manifest = read_manifest(campaign_dir)
    now = time.time()
    runs_dir = campaign_dir / "runs"
    read = [e.run_name for e in manifest.runs if not running_only or e.status == "running"]
    figures = log_figures(read_run_columns(runs_dir, read, STATUS_COLUMNS))
    runs = [run_state(e, runs_dir / e.run_name, now, stale_after_s, figures.get(e.run_name))
            if not running_only or e.status == "running" else settled_state(e, runs_dir / e.run_name)
            for e in manifest.runs]
    counts = {s: sum(r["status"] == s for r in runs) for s in ("pending", "running", "paused", "stale", "completed",
                                                        "failed", "stopped", "missing")}
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
    files = [campaign_dir / "manifest.json", campaign_dir / "manifest.events.jsonl",
             *campaign_dir.glob("runs/*/metrics*.arrows")]
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


class RunSummary(TypedDict):
    """One run outside a campaign, as `status` shows it (JSON-able; None: not logged yet)."""

    dir: str
    run_name: str
    condition: str | None
    seed: object  # as run_meta.json holds it
    status: str  # "completed", "running" or "stale"
    step: int | None
    max_steps: object
    mean_reward: float | None
    correct_rate: float | None
    loss: float | None
    tokens_per_second: float | None
    sample_time_s: float | None
    train_time_s: float | None
    step_time_s: float | None
    wall_time_s: float | None
    last_update_s: float | None


def is_run_dir(path: Path) -> bool:
    return (Path(path) / "metrics.arrows").is_file()


def find_runs(root: Path, campaigns: list[Path]) -> list[Path]:
    """`root` itself if it is a run directory, else every run directory below it not inside one of `campaigns`."""
    root = Path(root)
    if is_run_dir(root):
        return [root]
    if not root.is_dir():
        return []
    inside = [c.resolve() for c in campaigns]
    found = {p.parent for p in root.rglob("metrics.arrows")}
    return sorted(p for p in found if not any(c in p.resolve().parents for c in inside))


def _completed(run_dir: Path) -> bool:
    try:
        return json.loads((run_dir / "trainer_state.json").read_text()).get("checkpoint_name") == "final"
    except (OSError, ValueError, AttributeError):
        return False


def _meta(run_dir: Path) -> dict[str, object]:
    try:
        meta: object = json.loads((run_dir / "run_meta.json").read_text())
    except (OSError, ValueError):
        return {}
    return cast(dict[str, object], meta) if isinstance(meta, dict) else {}


def _field(data: object, key: str) -> object:
    """`data[key]` when `data` is a JSON object (else None)."""
    return cast(dict[str, object], data).get(key) if isinstance(data, dict) else None


def _number(value: object) -> float | None:
    if not isinstance(value, (Real, str)):  # numpy's numbers too
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    return number if number == number else None  # NaN: no value


def run_summary(run_dir: Path, *, now: float | None = None, stale_after_s: float = STALE_AFTER_S) -> RunSummary:
    """One run's status as a JSON-able dict (`status` None fields: nothing logged yet)."""
    run_dir = Path(run_dir)
    now = time.time() if now is None else now
    hist = read_history(run_dir)
    meta = _meta(run_dir)
    last = cast(dict[str, object], hist.iloc[-1].to_dict()) if len(hist) else {}
    updated = max((f.stat().st_mtime for f in run_dir.glob("metrics*.arrows")), default=None)
    status = "completed" if _completed(run_dir) else "running"
    if status == "running" and (updated is None or now - updated > stale_after_s):
        status = "stale"
    condition = last.get("condition") or meta.get("condition")
    step = _number(last.get("step"))
    return RunSummary(
        dir=str(run_dir), run_name=str(meta.get("run_name") or run_dir.name),
        condition=str(condition) if condition else None, seed=meta.get("seed"), status=status,
        step=int(step) if last and step is not None else None,
        max_steps=_field(_field(meta.get("config"), "training"), "max_steps"),
        mean_reward=_number(last.get("mean_reward")), correct_rate=_number(last.get("correct_rate")),
        loss=_number(last.get("loss")), tokens_per_second=_number(last.get("tokens_per_second")),
        sample_time_s=_number(last.get("sample_time_s")), train_time_s=_number(last.get("train_time_s")),
        step_time_s=_number(last.get("step_time_s")),
        wall_time_s=float(hist["step_time_s"].sum()) if "step_time_s" in hist else None,
        last_update_s=None if updated is None else max(0.0, now - updated),
    )
