"""Calibration figures from the logs of earlier runs (a pilot), for `retrain-ray explain --calibrate`.

Reads a run directory (its Arrow metrics log, `run_meta.json`), a campaign directory (`manifest.json`
and its runs) or a directory holding them. Per run: the warm-start (`phase = "sft"`) and RL steps
apart, each with the median `step_time_s` over its recent steps (the later half, seed 000's figure),
the wall clock per step (the mean spacing of the rows' `wall_time`: what the estimate adds up) and
the between-step overhead (that spacing over `step_time_s`: logging, checkpoints, the warm start's
probe); whether the warm start ended; `max_token_hit_rate`; tokens/s; the back-pressure
regimes and actions; the run's start-up (trial start to its first step) and teardown (last step to the
trial's end); the size of a checkpoint. Per campaign: its own start-up (driver process start to the
first run's start), teardown (last run's end to the manifest's final write) and the handover between
a run's end and the next run's start in its slot.

`RunFigures` and `CampaignFigures` are plain records (calibration_records.py); the runs' figures are computed
on a few columns of all their logs at once (calibration_columns.py); `pooled` merges runs (a condition's, or all).
"""

from __future__ import annotations

import json
import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import cast

import pandas as pd

from retrain_ray.campaign.capacity.calibration_columns import (
    COLUMNS,
    RunContext,
    number,
    run_figures,
    runs_figures,
    seconds,
)
from retrain_ray.campaign.capacity.calibration_records import (
    Calibration,
    CampaignFigures,
    PhaseFigures,
    RunFigures,
)
from retrain_ray.logs.manifest import MANIFEST, RunRecord, SessionRecord, read_manifest

__all__ = ["Calibration", "CampaignFigures", "PhaseFigures", "RunFigures", "campaign_figures", "frequencies",
           "mean_of", "median_of", "pooled_phase", "read_calibration", "run_figures"]


# --- reading ---------------------------------------------------------------------------------------


def _iso(value: object) -> float | None:
    return seconds(value) if isinstance(value, str) else None


def _tune_finished_at(campaign_dir: Path, run_name: str) -> float | None:
    """The trial's last report time from Tune's result.json (manifests before `finished_at` was recorded)."""
    path = campaign_dir / "tune" / run_name / "result.json"
    try:
        lines = path.read_text(encoding="utf-8").strip().splitlines()
        return number(json.loads(lines[-1]).get("timestamp")) if lines else None
    except (OSError, ValueError, AttributeError):
        return None


def _handover(entries: Sequence[RunRecord], slots: int) -> float | None:
    """Median seconds from a run's end to the start of the run that took its slot."""
    starts = sorted(s for s in (number(e.started_at) for e in entries) if s is not None)
    ends = sorted(f for f in (number(e.finished_at) for e in entries) if f is not None)
    gaps: list[float] = []
    for start in starts[slots:]:
        before = [f for f in ends if f <= start]
        if before:
            gaps.append(start - before[-1])
    return statistics.median(gaps) if gaps else None


def campaign_figures(campaign_dir: Path) -> tuple[CampaignFigures, list[RunFigures]]:
    """A campaign's own figures and its runs' (those with logged steps)."""
    manifest = read_manifest(campaign_dir)
    entries: list[RunRecord] = []
    contexts: dict[Path, RunContext] = {}
    for entry in manifest.runs:
        run_dir = Path(entry.run_dir or campaign_dir / "runs" / entry.run_name)
        if not run_dir.is_dir():
            run_dir = campaign_dir / "runs" / entry.run_name
        finished = number(entry.finished_at)
        if finished is None and entry.status == "completed":
            finished = _tune_finished_at(campaign_dir, entry.run_name)
        entries.append(entry.model_copy(update={"finished_at": finished}))
        contexts[run_dir] = RunContext(entry.run_name, entry.seed if "seed" in entry.model_fields_set else None,
                                       number(entry.started_at), finished, run_dir / "work")
    runs = runs_figures(contexts)
    first = manifest.sessions[0] if manifest.sessions else SessionRecord()
    began = number(first.process_started_at or None) or _iso(manifest.created or None) or number(first.started or None)
    starts = [s for s in (number(e.started_at) for e in entries) if s is not None]
    ends = [f for f in (number(e.finished_at) for e in entries) if f is not None]
    done = manifest.status in ("done", "partial") and len(manifest.sessions) <= 1
    updated = _iso(manifest.updated or None) if done else None
    figures = CampaignFigures(
        name=manifest.name or campaign_dir.name,
        path=str(campaign_dir),
        runs=len(manifest.runs),
        max_concurrent=manifest.max_concurrent or 1,
        startup_s=min(starts) - began if starts and began is not None else None,
        teardown_s=max(0.0, updated - max(ends)) if updated is not None and ends else None,
        handover_s=_handover(entries, manifest.max_concurrent or 1),
        wall_time_s=updated - began if updated is not None and began is not None else None,
    )
    return figures, runs


def _single_run(run_dir: Path) -> RunFigures | None:
    rows = _read_columns(run_dir)
    if rows.empty:
        return None
    meta_path = next((p for p in (run_dir / "run_meta.json", run_dir / "work" / "run_meta.json") if p.is_file()),
                     run_dir / "run_meta.json")  # a `train` run's own, or a campaign run's work dir
    seed, started = None, None
    if meta_path.is_file():
        try:
            seed = json.loads(meta_path.read_text(encoding="utf-8")).get("seed")
        except (OSError, ValueError, AttributeError):
            seed = None
        started = meta_path.stat().st_mtime  # written as the run starts, before the model loads
    logged_name = rows["run"].iloc[-1] if "run" in rows else None
    return run_figures(str(logged_name or run_dir.name), rows, seed=seed, started_at=started, work_dir=run_dir)


def _read_columns(run_dir: Path) -> pd.DataFrame:
    """A single run's log (its `run` and the figures' columns), in step order; empty when it cannot be read."""
    from retrain_ray.logs import read_stream  # pyright: ignore[reportUnknownVariableType]  # returns a pyarrow Table

    try:
        table = read_stream(run_dir, name="metrics")  # pyright: ignore[reportUnknownVariableType]  # a pyarrow Table
    except (OSError, ValueError):
        return pd.DataFrame()
    names = cast("list[str]", table.column_names)  # pyright: ignore[reportUnknownMemberType]
    wanted = [c for c in ("run", *COLUMNS) if c in names]
    return cast("pd.DataFrame", table.select(wanted).to_pandas())  # pyright: ignore[reportUnknownMemberType]


def read_calibration(directory: str | Path) -> Calibration:
    """Figures from a run, a campaign, or a directory holding them; ValueError when it holds none."""
    root = Path(directory)
    if not root.is_dir():
        raise ValueError(f"--calibrate {directory}: not a directory; pass a pilot run or campaign directory "
                         "(e.g. logs/<pilot>)")
    campaigns: list[CampaignFigures] = []
    runs: list[RunFigures] = []
    campaign_dirs = sorted(p.parent for p in root.rglob(MANIFEST) if "tune" not in p.parent.parts[len(root.parts):])
    for campaign_dir in campaign_dirs:
        try:
            figures, its_runs = campaign_figures(campaign_dir)
        except (FileNotFoundError, ValueError):
            continue
        campaigns.append(figures)
        runs += its_runs
    inside = tuple(campaign_dirs)
    for log in sorted(root.rglob("metrics*.arrows")):
        run_dir = log.parent
        if any(run_dir.is_relative_to(c) for c in inside) or any(r.run_name == run_dir.name for r in runs):
            continue
        single = _single_run(run_dir)
        if single is not None:
            runs.append(single)
    if not runs:
        raise ValueError(f"--calibrate {directory}: no run with logged steps found (no metrics*.arrows below it); "
                         "run a pilot first (a few seeds, part of max_steps) and pass its directory")
    return Calibration(str(root), tuple(runs), tuple(campaigns))


# --- pooling ---------------------------------------------------------------------------------------


def pooled_phase(phases: Iterable[PhaseFigures | None]) -> PhaseFigures | None:
    present = [p for p in phases if p is not None and p.steps]
    if not present:
        return None
    return PhaseFigures(
        steps=sum(p.steps for p in present),
        recent_step_times=tuple(t for p in present for t in p.recent_step_times),
        step_time_sum=sum(p.step_time_sum for p in present),
        wall_span_sum=sum(p.wall_span_sum for p in present),
        spans=sum(p.spans for p in present),
    )


def median_of(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def mean_of(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.fmean(present) if present else None


def frequencies(counts: Iterable[Mapping[str, int]]) -> dict[str, float]:
    """Summed counts as shares of their total."""
    total: Counter[str] = Counter()
    for c in counts:
        total.update(c)
    n = sum(total.values())
    return {k: v / n for k, v in total.most_common()} if n else {}
