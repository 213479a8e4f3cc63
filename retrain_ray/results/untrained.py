"""A run's end summary line for steps that trained nothing (issue 34, "no silent no-ops").

Every step logs a row; `phase` says whether it was a warm-start ("sft") or an RL ("rl") step and
`trained = false` marks an RL step whose groups all tied (no advantage, no update). A run whose steps
were all warm start, or whose RL steps did not all train, gets one line saying so; one that trained
on every step gets none. Rows of logs written before `phase` / `trained` existed count as trained RL.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    import pandas as pd

_COLUMNS = ("phase", "trained")


def untrained_note(rows: Sequence[Mapping[str, object]]) -> str | None:
    """"12 of 20 steps trained nothing: every group tied", "all 5 steps were warm start (SFT): no RL
    step ran", or None when every step trained (or none was logged)."""
    steps = len(rows)
    rl_rows = [r for r in rows if r.get("phase") in (None, "rl")]
    if steps and not rl_rows:
        return f"all {steps} steps were warm start (SFT): no RL step ran"
    idle = sum(1 for r in rl_rows if r.get("trained") is False)
    if not idle:
        return None
    return f"{idle} of {steps} steps trained nothing: every group tied"


def run_untrained_note(run_dir: Path) -> str | None:
    """`untrained_note` of the steps a run directory's metrics stream logged (None without one)."""
    # deferred: loads pyarrow, which importing this module does not need
    from retrain_ray.logs.stream import read_stream  # pyright: ignore[reportUnknownVariableType]  # pyarrow is untyped

    try:
        table = read_stream(run_dir)  # pyright: ignore[reportUnknownVariableType]
    except FileNotFoundError:
        return None
    names = cast("list[str]", table.column_names)  # pyright: ignore[reportUnknownMemberType]
    columns = [c for c in _COLUMNS if c in names]
    if not columns:  # a log written before `phase` and `trained`: every step trained
        return None
    rows = cast("list[dict[str, object]]", table.select(columns).to_pylist())  # pyright: ignore[reportUnknownMemberType]
    return untrained_note(rows)


def history_untrained_note(history: pd.DataFrame) -> str | None:
    """`untrained_note` of a run's history as `CampaignResults` reads it (missing values become None)."""
    columns = [c for c in _COLUMNS if c in history.columns]
    if not columns:
        no_columns: list[dict[str, object]] = [{}] * len(history)
        return untrained_note(no_columns)
    cells = history[columns].astype(object)
    return untrained_note(cells.where(cells.notna(), None).to_dict("records"))  # pyright: ignore[reportUnknownMemberType, reportArgumentType]


def campaign_untrained_lines(runs: Iterable[tuple[str, pd.DataFrame]]) -> list[str]:
    """One "RUN: note" line per run (`(run name, history)` pairs) that had steps training nothing."""
    notes = ((name, history_untrained_note(history)) for name, history in runs)
    return [f"{name}: {note}" for name, note in notes if note is not None]
