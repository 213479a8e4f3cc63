"""`retrain-ray bottleneck` over a campaign of many runs: the breakdown of results/bottleneck.py computed on
columns, not rows.

`bottleneck.breakdown` splits one row (a dict) at a time; over a 1,000-run campaign of 500 steps that was half
a million rows of 100 columns made into dicts. Here each run directory's log is read for the columns the
split uses only (logs/run_columns.py), every row is split at once (`part_seconds`, the same rule as
`bottleneck.split_row`) and the parts are summed per run and per condition in groupbys.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

import pandas as pd

from retrain_ray.logs.run_columns import RUN, read_run_columns, stream_columns
from retrain_ray.results.bottleneck import PART_COLUMNS, PARTS, Breakdown

RETRIES = "endpoint_errors"


def part_seconds(frame: pd.DataFrame) -> pd.DataFrame:
    """Per row of `frame`, the seconds of each part (`PARTS`) and its endpoint retries: `split_row` on every
    row at once (a value that is no number counts 0)."""
    zeros = pd.Series(0.0, index=frame.index)

    def number(column: str) -> pd.Series:
        if column not in frame:
            return zeros
        return pd.to_numeric(frame[column], errors="coerce").astype(float).fillna(0.0)

    parts = {part: number(column) for part, column in PART_COLUMNS.items()}
    parts["wait"] = sum((number(c) for c in wait_columns(frame.columns)), zeros)
    parts["sample"] = (parts["sample"] - parts["wait"]).clip(lower=0.0)
    accounted = sum(parts.values(), zeros)
    parts["other"] = (number("step_time_s") - accounted).clip(lower=0.0)
    return pd.DataFrame({**{p: parts[p] for p in PARTS}, RETRIES: number(RETRIES)})


def wait_columns(columns: Iterable[object]) -> list[str]:
    """The columns that are waits (`*wait*_s`: a throttle's, a shared engine's)."""
    return [str(c) for c in columns if "wait" in str(c) and str(c).endswith("_s")]


def summed(parts: pd.DataFrame) -> Breakdown:
    """One `Breakdown` of the rows of `parts` (`part_seconds`, with a `steps` column of 1 per row summed)."""
    seconds = {p: float(parts[p].sum()) for p in PARTS}
    return Breakdown(seconds=seconds, step_time_s=sum(seconds.values()), steps=int(parts["steps"].sum()),
                     endpoint_retries=float(parts[RETRIES].sum()))


def read_breakdowns(directory: Path, run_dirs: Sequence[Path]) -> tuple[dict[str, tuple[str, Breakdown]],
                                                                         dict[str, Breakdown]]:
    """Per run (named by its path below `directory`): its condition (its last row's, else its directory's
    name) and breakdown; per condition, the breakdown of all its runs' rows (sorted by condition)."""
    frames: list[pd.DataFrame] = []
    for parent, names in _by_parent(run_dirs).items():
        wanted = ["condition", "step_time_s", *PART_COLUMNS.values(), RETRIES, *wait_columns(stream_columns(parent / names[0]))]
        frame = read_run_columns(parent, names, list(dict.fromkeys(wanted)))
        prefix = "" if parent == directory or directory in run_dirs else f"{parent.relative_to(directory)}/"
        frames.append(frame.assign(**{RUN: (prefix + frame[RUN].astype(str)) if len(frame) else frame[RUN]}))
    frame = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=[RUN, "condition"])
    if frame.empty:
        return {}, {}
    parts = part_seconds(frame).assign(steps=1, **{RUN: frame[RUN]})
    last_condition = frame.groupby(RUN, sort=False)["condition"].last() if "condition" in frame else None
    per_run: dict[str, tuple[str, Breakdown]] = {}
    conditions: dict[str, str] = {}
    for run, rows in parts.groupby(RUN, sort=False):
        condition = last_condition.get(run) if last_condition is not None else None
        name = str(run)
        conditions[name] = str(condition) if isinstance(condition, str) and condition else Path(name).name
        per_run[name] = (conditions[name], summed(rows))
    parts["condition"] = parts[RUN].map(conditions)
    by_condition = {str(c): summed(rows) for c, rows in sorted(parts.groupby("condition"), key=lambda kv: str(kv[0]))}
    return per_run, by_condition


def _by_parent(run_dirs: Sequence[Path]) -> dict[Path, list[str]]:
    grouped: dict[Path, list[str]] = {}
    for run_dir in run_dirs:
        grouped.setdefault(run_dir.parent, []).append(run_dir.name)
    return grouped
