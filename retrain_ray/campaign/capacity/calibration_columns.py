"""A pilot's per-run calibration figures computed on columns, not rows (`explain --calibrate` at scale).

Reading every run's whole log as dicts (`to_pylist`: about 100 columns a row) cost 30 s of CPU over a
1,000-run x 500-step directory. Here the runs' logs are read for the `COLUMNS` the figures use only, every
run of a folder at once (logs/run_columns.py), converted to arrays once, and each run's figures are taken from
its slice of those arrays. The rules are those of the row-by-row reading they replace, figure for figure: a
value that is no finite number counts as missing, the "recent" step times are the later half of a phase's
positive ones, a span is a step whose row follows a row with an earlier wall time, and sums add up in step
order (Python's `sum`, as before, so the figures are the same to the last bit).
"""

from __future__ import annotations

import datetime as dt
import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import numpy as np
import numpy.typing as npt
import pandas as pd

from retrain_ray.campaign.capacity.calibration_records import PhaseFigures, RunFigures
from retrain_ray.logs.run_columns import RUN, read_run_columns

WARM_START = "sft"
CHECKPOINTS = "checkpoints"  # the run's checkpoint folders live in <work>/checkpoints/
COLUMNS = ("step", "wall_time", "step_time_s", "phase", "condition", "max_token_hit_rate", "tokens_per_second",
           "bp_regime", "bp_action", "sft_probe_correct_rate")

Floats = npt.NDArray[np.float64]
Objects = npt.NDArray[np.object_]


def number(value: object) -> float | None:
    """A finite number as a float, else None (a bool is no number)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    number = float(value)
    return number if number == number and abs(number) != float("inf") else None


def seconds(value: object) -> float | None:
    """A row's wall_time (datetime, or an ISO string from JSON) as Unix seconds."""
    if isinstance(value, pd.Timestamp):
        value = None if value is pd.NaT else value.to_pydatetime()
    if isinstance(value, dt.datetime):
        return value.timestamp()
    if isinstance(value, str):
        try:
            return dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return None
    return number(value)


@dataclass(frozen=True)
class RunContext:
    """What the manifest (or `run_meta.json`) says of a run besides its log."""

    run_name: str
    seed: int | None = None
    started_at: float | None = None
    finished_at: float | None = None
    work_dir: Path | None = None


@dataclass(frozen=True)
class Columns:
    """Rows as arrays (one run's in step order, or many runs' one after another); NaN/None where missing."""

    wall_s: Floats
    step_time_s: Floats
    warm: npt.NDArray[np.bool_]
    max_token_hit_rate: Floats
    tokens_per_second: Floats
    sft_probe_correct_rate: Floats
    condition: Objects
    bp_regime: Objects
    bp_action: Objects

    @classmethod
    def of(cls, frame: pd.DataFrame) -> Columns:
        phase = _objects(frame, "phase")
        return cls(_wall_seconds(frame), _floats(frame, "step_time_s"), phase == WARM_START,
                   _floats(frame, "max_token_hit_rate"), _floats(frame, "tokens_per_second"),
                   _floats(frame, "sft_probe_correct_rate"), _objects(frame, "condition"),
                   _objects(frame, "bp_regime"), _objects(frame, "bp_action"))

    def take(self, rows: npt.NDArray[np.intp]) -> Columns:
        return Columns(self.wall_s[rows], self.step_time_s[rows], self.warm[rows], self.max_token_hit_rate[rows],
                       self.tokens_per_second[rows], self.sft_probe_correct_rate[rows], self.condition[rows],
                       self.bp_regime[rows], self.bp_action[rows])


def _floats(frame: pd.DataFrame, column: str) -> Floats:
    if column not in frame or frame[column].dtype == bool:
        return np.full(len(frame), np.nan)
    values = pd.to_numeric(frame[column], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    return np.where(np.isfinite(values), values, np.nan)


def _objects(frame: pd.DataFrame, column: str) -> Objects:
    if column not in frame:
        return np.full(len(frame), None, dtype=object)
    return frame[column].to_numpy(dtype=object)


def _wall_seconds(frame: pd.DataFrame) -> Floats:
    if "wall_time" not in frame:
        return np.full(len(frame), np.nan)
    column = frame["wall_time"]
    if isinstance(column.dtype, pd.DatetimeTZDtype):  # the Arrow logs' type: all at once
        elapsed = (column - pd.Timestamp(0, tz="UTC")).dt.total_seconds()
        return np.asarray(elapsed.to_numpy(dtype=np.float64, na_value=np.nan), dtype=np.float64)
    return np.array([np.nan if s is None else s for s in map(seconds, column.to_numpy(dtype=object))], dtype=np.float64)


def _present(values: Floats) -> Floats:
    return values[~np.isnan(values)]


def _later_half(values: Floats) -> Floats:
    return values[len(values) // 2:]


def _optional(value: float) -> float | None:
    return None if np.isnan(value) else float(value)


def _text(value: object) -> str:
    """A logged string as text; "" for a missing one (None, NaN) or an empty one."""
    return str(value) if value and value == value else ""


def _frequencies(values: Objects) -> dict[str, int]:
    present = cast("list[object]", values[pd.notna(values)].tolist())
    counts = Counter(present)  # in first-seen order, as the rows' own count was
    return {_text(value): n for value, n in counts.items() if _text(value)}


def phase_figures(step_time_s: Floats, wall_s: Floats, previous_wall_s: Floats) -> PhaseFigures | None:
    """Figures of one phase's rows; `previous_wall_s[i]` is the wall time of the row logged before row i."""
    if not len(step_time_s):
        return None
    timed = step_time_s > 0  # NaN compares False: a missing step time is no timed step
    spans = timed & (wall_s > previous_wall_s)
    return PhaseFigures(len(step_time_s), tuple(_later_half(step_time_s[timed]).tolist()),
                        sum(step_time_s[spans].tolist()), sum((wall_s - previous_wall_s)[spans].tolist()),
                        int(spans.sum()))


def _checkpoint_bytes(work_dir: Path) -> int | None:
    """The size of the run's largest checkpoint (a folder in `checkpoints/`), None when it saved none."""
    folders = [d for parent in work_dir.rglob(CHECKPOINTS) if parent.is_dir() for d in parent.iterdir() if d.is_dir()]
    sizes = [sum(f.stat().st_size for f in d.rglob("*") if f.is_file()) for d in folders]
    return max(sizes) if sizes else None


def figures_of(rows: Columns, context: RunContext) -> RunFigures:
    """A run's figures from its rows (in step order) and what the manifest says of it."""
    wall, step_time, warm = rows.wall_s, rows.step_time_s, rows.warm
    previous = np.concatenate(([np.nan], wall[:-1]))
    hits = _present(_later_half(rows.max_token_hit_rate[~warm]))
    speeds = _present(_later_half(rows.tokens_per_second[~warm]))
    speeds = speeds[speeds != 0]
    has_warm, has_rl, n = bool(warm.any()), bool((~warm).any()), len(wall)
    last_probe = _optional(rows.sft_probe_correct_rate[warm][-1]) if has_warm else None
    startup = teardown = None
    if n and context.started_at is not None and not np.isnan(wall[0]):
        first_step = 0.0 if np.isnan(step_time[0]) else float(step_time[0])
        startup = max(0.0, float(wall[0]) - first_step - context.started_at)
    if n and context.finished_at is not None and not np.isnan(wall[-1]):
        teardown = max(0.0, context.finished_at - float(wall[-1]))
    return RunFigures(
        run_name=context.run_name,
        condition=_text(rows.condition[-1]) if n else "",
        seed=context.seed,
        steps=n,
        warm_start=phase_figures(step_time[warm], wall[warm], previous[warm]),
        rl=phase_figures(step_time[~warm], wall[~warm], previous[~warm]),
        warm_start_ended=has_warm and has_rl,
        max_token_hit_rate=statistics.fmean(hits.tolist()) if len(hits) else None,
        tokens_per_s=statistics.median(speeds.tolist()) if len(speeds) else None,
        bp_regimes=_frequencies(rows.bp_regime),
        bp_actions=_frequencies(rows.bp_action),
        startup_s=startup,
        teardown_s=teardown,
        checkpoint_bytes=_checkpoint_bytes(context.work_dir) if context.work_dir is not None else None,
        warm_start_capped=has_warm and has_rl and last_probe is None,
        warm_start_last_probe=last_probe,
    )


def run_figures(run_name: str, rows: pd.DataFrame | Sequence[Mapping[str, object]], *, seed: int | None = None,
                started_at: float | None = None, finished_at: float | None = None,
                work_dir: Path | None = None) -> RunFigures:
    """One run's figures from its metric rows in step order (a frame, or dicts)."""
    frame = rows if isinstance(rows, pd.DataFrame) else pd.DataFrame.from_records(list(rows))
    return figures_of(Columns.of(frame), RunContext(run_name, seed, started_at, finished_at, work_dir))


def runs_figures(runs: Mapping[Path, RunContext]) -> list[RunFigures]:
    """The figures of every run directory of `runs` that has logged steps, in `runs`' order; the runs of one
    folder are read at once."""
    by_parent: dict[Path, list[str]] = {}
    for run_dir in runs:
        by_parent.setdefault(run_dir.parent, []).append(run_dir.name)
    slices: dict[Path, Columns] = {}
    for parent, names in by_parent.items():
        frame = read_run_columns(parent, names, COLUMNS)
        if frame.empty:
            continue
        columns = Columns.of(frame)
        groups = cast("dict[object, npt.NDArray[np.intp]]", frame.groupby(RUN, sort=False).indices)
        slices.update({parent / str(name): columns.take(rows) for name, rows in groups.items()})
    return [figures_of(slices[run_dir], context) for run_dir, context in runs.items() if run_dir in slices]
