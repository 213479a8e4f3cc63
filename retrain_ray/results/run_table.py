"""What `retrain-ray results` shows of the runs and condition tables on a terminal.

The default view fits a 120-column terminal: run, condition, seed, status, steps, the compared metric's
first/last/best value (headed "first", "last", "best"; the table's title names the metric) and the
condition's verdict against the best. `wide` shows every column, `columns`
the ones named. `--json` and `--csv` are not views: they always hold every column.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

RUN_IDENTITY = ("run_name", "condition", "seed", "status", "steps_trained")


def run_view(runs: pd.DataFrame, verdicts: pd.DataFrame, metric: str, *, wide: bool = False,
             columns: Sequence[str] | None = None) -> pd.DataFrame:
    """The runs table with each run's verdict (its condition's against the best: "best", "better",
    "worse", "undecided"; blank when the condition was not compared), cut to the view asked for.
    Raises KeyError naming the columns there are when `columns` names one that is not."""
    by_condition = {str(c): _verdict(str(c), verdicts) for c in runs["condition"].unique()} if len(runs) else {}
    table = runs.assign(verdict=[by_condition[str(c)] for c in runs["condition"]]) if len(runs) else runs
    if wide:
        return table
    if columns is not None:
        unknown = [c for c in columns if c not in table.columns]
        if unknown:
            raise KeyError(f"--columns {','.join(unknown)}: no such column; the runs table has "
                           f"{', '.join(map(str, table.columns))}")
        return table[list(columns)]
    short = {"run_name": "run", "steps_trained": "steps", f"first_{metric}": "first", f"last_{metric}": "last",
             f"best_{metric}": "best", "verdict": "verdict"}
    wanted = [c for c in [*RUN_IDENTITY, f"first_{metric}", f"last_{metric}", f"best_{metric}", "verdict"]
              if c in table.columns]
    return table[wanted].rename(columns=short)


def condition_view(summary: pd.DataFrame, metric: str, *, wide: bool = False) -> pd.DataFrame:
    """The per-condition summary: by default runs, failed and the compared metric's mean, std and ci95."""
    if wide:
        return summary
    wanted = ["condition", "runs", "failed", f"{metric}_mean", f"{metric}_std", f"{metric}_ci95"]
    return summary[[c for c in wanted if c in summary.columns]]


def _verdict(condition: str, verdicts: pd.DataFrame) -> str:
    if verdicts.empty:
        return ""
    if condition in set(verdicts["best"]):
        return "best"
    match = verdicts.loc[verdicts["condition"] == condition, "verdict"]
    return str(match.iloc[0]) if len(match) else ""
