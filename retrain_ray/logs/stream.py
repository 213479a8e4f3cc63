"""Live logs as Arrow IPC stream files: crash safe, readable while written, resumable by segments.

Each `write_rows` call becomes one record batch, flushed to the OS at once (fsync optional), so a
reader in another process sees every completed call while the writer is still open. A crash can
only tear the last batch; `read_stream` keeps the complete batches before it and warns.

Arrow IPC streams cannot be reopened for append, so a writer never touches an existing file: on
resume it starts the next segment (`metrics.arrows`, then `metrics.1.arrows`, `metrics.2.arrows`,
...). Readers concatenate all segments in order and de-duplicate on a key: for each key value the
rows of the *last record batch* that wrote it win (a resumed run re-logs the steps after its last
checkpoint), and the result is sorted by key.

End-of-run files: Parquet compaction of a stream, and `run_meta.json`; both written atomically
(temporary file in the same directory, then `os.replace`), so readers see the old file or the new.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

SUFFIX = ".arrows"
_BATCH, _ROW = "__batch", "__row"


def segment_paths(directory: Path, name: str) -> list[Path]:
    """Existing segments of stream `name` in `directory`, in write order."""
    pattern = re.compile(rf"^{re.escape(name)}(?:\.(\d+))?{re.escape(SUFFIX)}$")
    found = []
    for path in directory.glob(f"{name}*{SUFFIX}"):
        match = pattern.match(path.name)
        if match:
            found.append((int(match.group(1) or 0), path))
    return [path for _, path in sorted(found)]


def next_segment_path(directory: Path, name: str) -> Path:
    """Path of the first segment that does not exist yet."""
    existing = segment_paths(directory, name)
    if not existing:
        return directory / f"{name}{SUFFIX}"
    last = existing[-1].name[len(name):-len(SUFFIX)]
    index = int(last[1:]) + 1 if last else 1
    return directory / f"{name}.{index}{SUFFIX}"


def _split_stream_path(path: Path) -> tuple[Path, str]:
    name = path.name[: -len(SUFFIX)] if path.name.endswith(SUFFIX) else path.stem
    return path.parent, re.sub(r"\.\d+$", "", name)


class ArrowStreamWriter:
    """Appends rows to a new segment of the stream at `path` (e.g. run_dir/metrics.arrows).

    The segment file is created at the first write, so a resumed run that logs nothing adds no file.
    """

    def __init__(self, path: str | Path, schema: pa.Schema, *, fsync: bool = False) -> None:
        self.directory, self.name = _split_stream_path(Path(path))
        self.schema = schema
        self.fsync = fsync
        self.path: Path | None = None
        self._sink: Any = None
        self._writer: Any = None

    def write_rows(self, rows: Sequence[dict[str, Any]]) -> None:
        """Write `rows` as one record batch and flush it to the file."""
        if not rows:
            return
        batch = pa.RecordBatch.from_pylist(list(rows), schema=self.schema)
        writer = self._writer if self._writer is not None else self._open()
        writer.write_batch(batch)
        self._sink.flush()
        if self.fsync:
            os.fsync(self._sink.fileno())

    def _open(self) -> pa.ipc.RecordBatchStreamWriter:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.path = next_segment_path(self.directory, self.name)
        self._sink = open(self.path, "xb")  # noqa: SIM115  (closed in close())
        self._writer = pa.ipc.new_stream(self._sink, self.schema)
        return self._writer

    def close(self) -> None:
        """Write the end-of-stream marker and close the file (idempotent)."""
        if self._writer is not None:
            self._writer.close()
            self._sink.close()
            self._writer = self._sink = None

    def __enter__(self) -> ArrowStreamWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _read_segment(path: Path) -> list[pa.RecordBatch]:
    """Every complete record batch of one segment; a torn tail is dropped with a warning."""
    batches: list[pa.RecordBatch] = []
    try:
        with pa.OSFile(str(path)) as source:
            reader = pa.ipc.open_stream(source)
            while True:
                try:
                    batches.append(reader.read_next_batch())
                except StopIteration:
                    break
    except (OSError, pa.ArrowInvalid) as exc:
        warnings.warn(
            f"{path}: torn or incomplete Arrow stream ({exc}); kept the {len(batches)} complete batches",
            RuntimeWarning,
            stacklevel=3,
        )
    return batches


def repair_torn_segments(directory: Path, name: str = "metrics") -> list[Path]:
    """Rewrites every torn segment of stream `name` with its complete batches only (atomically: a new
    file renamed over it), so readers stop warning; returns the segments repaired. For a writer-free
    moment (a resume, before the new segment opens)."""
    repaired = []
    for segment in segment_paths(Path(directory), name):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            batches = _read_segment(segment)
        if not caught:
            continue
        schema = batches[0].schema if batches else _empty(segment).schema
        tmp = segment.with_name(f".{segment.name}.repair")
        with open(tmp, "wb") as sink, pa.ipc.new_stream(sink, schema) as writer:
            for batch in batches:
                writer.write_batch(batch)
        os.replace(tmp, segment)
        repaired.append(segment)
    return repaired


def _steps_held(directory: Path, name: str) -> list[int]:
    """The steps of every row stream `name` holds (none: no segment)."""
    if not segment_paths(Path(directory), name):
        return []
    return read_stream(directory, name)["step"].to_pylist()


def repair_and_last_step(directory: Path, name: str = "metrics") -> int | None:
    """`repair_torn_segments`, then the last step stream `name` still holds: None when nothing was
    torn, -1 when no row is left. For a resume that must re-run the steps a torn tail lost."""
    if not repair_torn_segments(directory, name):
        return None
    return max(_steps_held(directory, name), default=-1)


def logged_through(directory: Path, name: str = "metrics") -> int:
    """`repair_torn_segments`, then the last step S such that stream `name` holds every step 0..S (-1:
    none). For a resume from a checkpoint the log did not report: rows after S were never logged."""
    repair_torn_segments(directory, name)
    steps = set(_steps_held(directory, name))
    last = -1
    while last + 1 in steps:
        last += 1
    return last


def _concat_with_positions(batches: list[pa.RecordBatch]) -> pa.Table:
    """One table of all batches plus each row's batch ordinal and global row number."""
    try:
        table = pa.Table.from_batches(batches)
    except pa.ArrowInvalid:  # segments written with different schema versions
        table = pa.concat_tables([pa.Table.from_batches([b]) for b in batches], promote_options="default")
    table = table.combine_chunks()
    ordinals = np.repeat(np.arange(len(batches), dtype=np.int64), [b.num_rows for b in batches])
    table = table.append_column(_BATCH, pa.array(ordinals))
    return table.append_column(_ROW, pa.array(np.arange(table.num_rows, dtype=np.int64)))


def _dedupe_last_batch_wins(table: pa.Table, key: Sequence[str]) -> pa.Table:
    columns = {name: table[name].to_pylist() for name in key}
    batch_of = table[_BATCH].to_pylist()
    winner: dict[tuple[Any, ...], int] = {}
    for i, batch in enumerate(batch_of):
        winner[tuple(columns[name][i] for name in key)] = batch
    keep = [winner[tuple(columns[name][i] for name in key)] == batch for i, batch in enumerate(batch_of)]
    return table.filter(pa.array(keep, pa.bool_()))


def read_stream(path_or_run_dir: str | Path, name: str = "metrics", key: Sequence[str] | None = ("step",)) -> pa.Table:
    """Read all segments of a stream (a run dir plus `name`, or one segment's path) into one table.

    Rows are de-duplicated on `key` (last record batch wins) and sorted by it; `key=None` keeps
    every row in write order. A missing stream is an error naming the directory and stream.
    """
    path = Path(path_or_run_dir)
    directory, name = (path, name) if path.is_dir() else _split_stream_path(path)
    segments = segment_paths(directory, name)
    if not segments:
        raise FileNotFoundError(f"no {name}{SUFFIX} stream in {directory}; is this a run directory?")
    batches = [batch for segment in segments for batch in _read_segment(segment)]
    if not batches:
        return _empty(segments[0])
    table = _concat_with_positions(batches)
    if key:
        import pyarrow.compute as pc  # deferred: heavy import, only needed when a stream is read back (run end, tools)

        table = _dedupe_last_batch_wins(table, key)
        table = table.take(pc.sort_indices(table, [(k, "ascending") for k in key] + [(_ROW, "ascending")]))  # pyright: ignore[reportAttributeAccessIssue]  # pyarrow stubs lack it
    return table.drop_columns([_BATCH, _ROW])


def _empty(segment: Path) -> pa.Table:
    try:
        with pa.OSFile(str(segment)) as source:
            return pa.ipc.open_stream(source).schema.empty_table()
    except (OSError, pa.ArrowInvalid):
        return pa.table({})


def _atomic_target(path: Path) -> Path:
    handle, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(handle)
    return Path(tmp)


def write_atomically(target: Path, write: Callable[[Path], object]) -> Path:
    """Calls `write(tmp)` for a temporary file next to `target`, then replaces `target` with it."""
    tmp = _atomic_target(target)
    try:
        write(tmp)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target


def write_parquet_atomic(table: pa.Table, target: Path) -> Path:
    """Write `table` to the Parquet file `target` atomically."""
    import pyarrow.parquet as pq  # deferred: heavy import, only needed when a run ends (not before its first step)

    return write_atomically(target, lambda tmp: pq.write_table(table, tmp))


def compact_to_parquet(run_dir: str | Path, name: str, key: Sequence[str] | None = ("step",)) -> Path:
    """Write `<run_dir>/<name>.parquet` from the de-duplicated segments of stream `name`."""
    run_dir = Path(run_dir)
    return write_parquet_atomic(read_stream(run_dir, name, key=key), run_dir / f"{name}.parquet")


def write_run_meta(run_dir: str | Path, meta: Mapping[str, Any]) -> Path:
    """Write `<run_dir>/run_meta.json` (indent 2; non-JSON values as strings)."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    text = json.dumps(dict(meta), indent=2, sort_keys=True, default=str) + "\n"
    return write_atomically(run_dir / "run_meta.json", lambda tmp: tmp.write_text(text))
