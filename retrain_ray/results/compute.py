"""What a campaign's runs cost in the user's units: GPU-hours and CPU-hours spent, and for an adaptive
campaign what its decisions saved against the full grid.

Spent: per run, the GPUs it held (the manifest's `gpus`: a packed run's share of its card, e.g. 0.25 with
`runs_per_gpu = 4`; 0 on CPU) x its wall time; CPU-hours the same with `cpus`. A run's wall time is its
logged steps x its measured time per step (the spread of its rows' `wall_time` over the steps between
them), so the time a resumed run spent waiting between sessions does not count.

Saved (adaptive only): the steps of the full grid (the adaptive plan's `grid_steps`: every condition x
every seed it could run x max_steps) that no run logged, at the campaign's mean measured time per step,
on the mean GPU (CPU) share of its runs.

A manifest written before runs recorded `gpus` and `cpus` has no shares: those runs count as unknown.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

import pandas as pd

from retrain_ray.logs.manifest import CampaignRecord, RunRecord

SECONDS_PER_HOUR = 3600.0


@dataclass(frozen=True)
class RunCompute:
    """One run's logged steps, measured seconds per step and the GPUs and CPUs it held (None: unknown)."""

    steps: int
    step_s: float
    gpus: float | None
    cpus: float | None

    @property
    def wall_h(self) -> float:
        return self.steps * self.step_s / SECONDS_PER_HOUR


@dataclass(frozen=True)
class ComputeUsed:
    """GPU- and CPU-hours spent; for an adaptive campaign the steps and hours its decisions saved."""

    gpu_hours: float
    cpu_hours: float
    runs: int
    runs_unknown: int  # runs whose manifest entry predates `gpus`/`cpus`: not counted
    adaptive: bool = False
    saved_steps: int = 0
    saved_gpu_hours: float = 0.0
    saved_cpu_hours: float = 0.0

    def to_json(self) -> dict[str, float | int | bool]:
        return asdict(self)


def step_seconds(history: pd.DataFrame) -> float:
    """A run's measured seconds per step: its rows' wall_time spread over the steps between them (0 with
    fewer than two timed rows)."""
    if "wall_time" not in history or "step" not in history:
        return 0.0
    timed = history.dropna(subset=["wall_time"]).sort_values("step")
    if len(timed) < 2:
        return 0.0
    steps = float(timed["step"].iloc[-1] - timed["step"].iloc[0])
    span = _seconds(timed["wall_time"].iloc[-1] - timed["wall_time"].iloc[0])
    return max(span, 0.0) / steps if steps > 0 else 0.0


def runs_compute(entries: Sequence[RunRecord], frame: pd.DataFrame, run: str = "run") -> dict[str, RunCompute]:
    """`run_compute` of every run in `entries` from one frame of their logs' `step` and `wall_time` (a `run`
    column, each run's rows by step: logs/run_columns.py), in a few groupbys."""
    rows = {str(k): int(v) for k, v in frame.groupby(run, sort=False).size().items()} if len(frame) else {}
    step_s = _step_seconds_by_run(frame, run)
    return {e.run_name: RunCompute(rows.get(e.run_name, 0), step_s.get(e.run_name, 0.0), e.gpus, e.cpus)
            for e in entries}


def _step_seconds_by_run(frame: pd.DataFrame, run: str) -> dict[str, float]:
    """`step_seconds` of each run of `frame`: its first and last timed rows' wall times over their steps."""
    if "wall_time" not in frame or "step" not in frame:
        return {}
    timed = frame.dropna(subset=["wall_time"])
    if timed.empty:
        return {}
    runs = timed.groupby(run, sort=False)
    first, last, count = runs.first(), runs.last(), runs.size()
    steps = (last["step"] - first["step"]).astype(float)
    span = last["wall_time"] - first["wall_time"]
    seconds = span.dt.total_seconds() if pd.api.types.is_timedelta64_dtype(span) else span.astype(float)
    per_step = (seconds.clip(lower=0.0) / steps).where((steps > 0) & (count >= 2), 0.0)
    return {str(k): float(v) for k, v in per_step.items()}


def _seconds(span: pd.Timedelta | float) -> float:
    """A difference of wall times in seconds: the recorder's streams read them back as timestamps."""
    return span.total_seconds() if isinstance(span, pd.Timedelta) else float(span)


def run_compute(entry: RunRecord, history: pd.DataFrame) -> RunCompute:
    return RunCompute(len(history), step_seconds(history), entry.gpus, entry.cpus)


def compute_used(manifest: CampaignRecord, runs: Mapping[str, RunCompute]) -> ComputeUsed:
    """Hours spent by `runs` (by run name) and, for an adaptive campaign, saved against its full grid."""
    known = [r for r in runs.values() if r.gpus is not None and r.cpus is not None]
    spent_gpu = sum(r.wall_h * (r.gpus or 0.0) for r in known)
    spent_cpu = sum(r.wall_h * (r.cpus or 0.0) for r in known)
    used = ComputeUsed(spent_gpu, spent_cpu, len(runs), len(runs) - len(known))
    grid = _grid_steps(manifest)
    if grid is None:
        return used
    saved = max(grid - sum(r.steps for r in runs.values()), 0)
    step_s = _mean([r.step_s for r in runs.values() if r.steps > 1])
    hours = saved * step_s / SECONDS_PER_HOUR
    return ComputeUsed(spent_gpu, spent_cpu, len(runs), used.runs_unknown, adaptive=True, saved_steps=saved,
                       saved_gpu_hours=hours * _mean([r.gpus or 0.0 for r in known]),
                       saved_cpu_hours=hours * _mean([r.cpus or 0.0 for r in known]))


def describe(used: ComputeUsed) -> list[str]:
    """The lines `results` prints: spent, and for an adaptive campaign saved against the full grid."""
    if used.runs_unknown == used.runs:
        return [f"compute spent: unknown: the manifest predates the GPUs and CPUs recorded per run ({used.runs} runs)"]
    cpu_only = used.gpu_hours == 0.0
    gpu = "0 GPU-hours (CPU only)" if cpu_only else f"{used.gpu_hours:.3g} GPU-hours"
    lines = [f"compute spent: {gpu}, {used.cpu_hours:.3g} CPU-hours over {used.runs} runs"
             " (GPUs held x wall time per run)"]
    if used.runs_unknown:
        lines.append(f"  {used.runs_unknown} run(s) not counted: their manifest entries predate the recorded "
                     "GPUs and CPUs per run")
    if used.adaptive:
        saved_gpu = "0 GPU-hours (CPU only)" if cpu_only else f"{used.saved_gpu_hours:.3g} GPU-hours"
        lines.append(f"saved against the full grid: {used.saved_steps} steps not run, {saved_gpu}, "
                     f"{used.saved_cpu_hours:.3g} CPU-hours (at the measured time per step)")
    return lines


def _grid_steps(manifest: CampaignRecord) -> int | None:
    if manifest.adaptive is None:
        return None
    grid = manifest.adaptive.plan.get("grid_steps")
    return int(grid) if isinstance(grid, (int, float)) else None


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0
