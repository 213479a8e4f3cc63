"""`metrics.jsonl`: a JSON-lines copy of a run's metrics stream, for `tail -f` and `jq` (as the original's).

The Arrow stream stays the record; this file mirrors it, one JSON object per logged step, appended and
flushed when the step's row is written, by the writer of the Arrow stream (the run's `ArrowRunObserver`,
or in a campaign the recorder actor). A line holds the row's non-null columns with the `extras` map
flattened into top-level keys (the original's flat metric names, e.g. `echo/...`) and `wall_time` as an
ISO 8601 string. JSON has no NaN or infinity: a non-finite float is written as null.

Resume: a resumed run logs again the steps after its checkpoint, and the Arrow readers keep the last
write of each step. This file does the same on the spot: at a writer's first rows, and whenever a row's
step is not after the last step it wrote, the file is rewritten atomically (temporary file + rename) from
the de-duplicated Arrow log, keeping the steps before that row, and the new rows are appended; a resumed
run leaves one line per step. `[logging] jsonl = false` writes no file.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from retrain_ray.logs.schemas import EXTRAS
from retrain_ray.logs.stream import read_stream, segment_paths, write_atomically

JSONL = "metrics.jsonl"


def _json_value(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dt.datetime):
        return value.isoformat()
    return value


def json_object(record: Mapping[str, Any]) -> dict[str, Any]:
    """One metrics record (as written to, or read back from, the Arrow stream) as its JSON object."""
    out = {name: _json_value(value) for name, value in record.items() if name != EXTRAS and value is not None}
    extras = record.get(EXTRAS) or {}
    pairs: Iterable[tuple[str, Any]] = extras.items() if isinstance(extras, Mapping) else extras
    out.update((name, _json_value(value)) for name, value in pairs if name not in out)
    return out


def json_line(record: Mapping[str, Any]) -> str:
    return json.dumps(json_object(record), allow_nan=False, separators=(",", ":")) + "\n"


def logged_records(run_dir: Path, before_step: int | None = None) -> list[dict[str, Any]]:
    """The de-duplicated metrics rows of the run's Arrow log (steps before `before_step` if given)."""
    if not segment_paths(run_dir, "metrics"):
        return []
    rows = read_stream(run_dir, "metrics").to_pylist()
    return [r for r in rows if before_step is None or r["step"] < before_step]


def rewrite_jsonl(run_dir: str | Path, before_step: int | None = None) -> int:
    """Rewrites `<run_dir>/metrics.jsonl` atomically from the Arrow log; returns the last step kept (-1: none)."""
    run_dir = Path(run_dir)
    records = logged_records(run_dir, before_step)
    text = "".join(json_line(r) for r in records)
    write_atomically(run_dir / JSONL, lambda tmp: tmp.write_text(text, encoding="utf-8"))
    return max((int(r["step"]) for r in records), default=-1)


class JsonlMirror:
    """Appends a run's metrics records to `<run_dir>/metrics.jsonl`, after the Arrow stream has them."""

    def __init__(self, run_dir: str | Path) -> None:
        self.run_dir = Path(run_dir)
        self._handle: IO[str] | None = None
        self._last_step = -1

    def write_records(self, records: Sequence[Mapping[str, Any]]) -> None:
        """Call after the same records reached the Arrow stream (the rewind reads them back from it)."""
        if not records:
            return
        first = int(records[0]["step"])
        if self._handle is None or first <= self._last_step:
            self._rewind(first)
        handle = self._handle
        assert handle is not None
        handle.write("".join(json_line(r) for r in records))
        handle.flush()
        self._last_step = max(self._last_step, *(int(r["step"]) for r in records))

    def _rewind(self, before_step: int) -> None:
        self.close()
        self._last_step = rewrite_jsonl(self.run_dir, before_step)
        self._handle = open(self.run_dir / JSONL, "a", encoding="utf-8")  # noqa: SIM115  (closed in close())

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None
