"""A few columns of many runs' logs, read at once into one frame: how `results`, `summary` and `status` read
a campaign of a thousand runs in seconds.

Reading each run's whole Arrow stream (every record batch, every metric and the `extras` map), de-duplicating
it and converting it to pandas cost about 40 ms a run: 80 s for `summary` at 1,000 runs x 500 steps. Here a
run whose Parquet copy (logs/parquet_export.py: de-duplicated, sorted by step, rewritten by the recorder and
once more when the run closes) is newer than its stream is read from it, only the asked columns;
a run still being written, or with no copy, from its stream, projected the same way. The tables are joined
in Arrow and converted to pandas once, with a `run` column, so the per-run figures are one `groupby`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import cast

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from retrain_ray.logs.stream import read_stream, segment_paths

RUN = "run"


def read_run_columns(runs_dir: Path, run_names: Sequence[str], columns: Sequence[str],
                     name: str = "metrics") -> pd.DataFrame:
    """`columns` (a log without one has it null) of stream `name` of every run in `run_names`, one frame with
    a `run` column, each run's rows sorted by step; a run with no log has no rows."""
    copies, live = _sources(runs_dir, run_names, name)
    tables = [_read_copies(copies, columns, name), *(_read_live(runs_dir / run, run, columns, name) for run in live)]
    tables = [t for t in tables if t is not None and t.num_rows]
    wanted = [RUN, *columns]
    if not tables:
        return pd.DataFrame(columns=wanted)
    joined = pa.concat_tables(tables, promote_options="default")
    return cast("pd.DataFrame", joined.select([c for c in wanted if c in joined.column_names]).to_pandas())


def _sources(runs_dir: Path, run_names: Sequence[str], name: str) -> tuple[list[Path], list[str]]:
    """The Parquet copies that are current (newer than every segment: a copy written in the same clock tick as
    a row may lack it), and the runs to read from their streams."""
    copies: list[Path] = []
    live: list[str] = []
    for run in run_names:
        segments = segment_paths(runs_dir / run, name) if (runs_dir / run).is_dir() else []
        if not segments:
            continue
        parquet = runs_dir / run / f"{name}.parquet"
        current = parquet.is_file() and parquet.stat().st_mtime > max(s.stat().st_mtime for s in segments)
        (copies.append(parquet) if current else live.append(run))
    return copies, live


def _read_copies(paths: list[Path], columns: Sequence[str], name: str) -> pa.Table | None:
    """The copies' `columns` (and `run`), one file after another: a `ParquetFile` reads its footer once (a
    copy's footer describes about 100 columns: 0.9 ms of CPU a file, where a multi-file dataset scan took 2 ms).
    A copy that cannot be read (cut short by a crash while written) gives way to its run's stream."""
    tables: list[pa.Table] = []
    for path in paths:
        try:
            copy = pq.ParquetFile(path)
            names = set(copy.schema_arrow.names)
            tables.append(copy.read(columns=[c for c in (RUN, *columns) if c in names], use_threads=False))
        except (OSError, pa.ArrowInvalid):
            tables.append(_read_live(path.parent, path.parent.name, columns, name))
    return pa.concat_tables(tables, promote_options="default") if tables else None


def _read_live(run_dir: Path, run: str, columns: Sequence[str], name: str) -> pa.Table:
    table = read_stream(run_dir, name=name)
    table = table.select([c for c in columns if c in table.column_names])
    return table.append_column(RUN, pa.array([run] * table.num_rows, pa.string()))


def stream_columns(run_dir: Path, name: str = "metrics") -> list[str]:
    """The columns of a run's stream `name` (its first segment's schema: a log's segments share it); [] when it
    has none or the segment cannot be read."""
    segments = segment_paths(run_dir, name)
    if not segments:
        return []
    try:
        with pa.OSFile(str(segments[0])) as source:
            return list(pa.ipc.open_stream(source).schema.names)
    except (OSError, pa.ArrowInvalid):
        return []
