"""End-of-run files: Parquet compaction of a stream, and `run_meta.json`; both written atomically
(temporary file in the same directory, then `os.replace`), so readers see the old file or the new."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from retrain_ray.logs.stream import read_stream

if TYPE_CHECKING:
    import pyarrow as pa


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
