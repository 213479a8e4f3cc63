"""`manifest.events.jsonl`: the manifest's run changes since `manifest.json` was last written whole.

At a thousand runs `manifest.json` is 3 MB; rewriting it at each run's start and end cost a 1,000-run
campaign's driver 2,000 writes (13 s, x42 per tenfold of runs). Instead a run's change is one appended
line `{"seq": N, "run": NAME, "set": {FIELD: VALUE, ...}}`, and the whole file is rewritten (compacted)
only every `compact_every` events, at each campaign-level change and when the campaign ends; the
compacted file records the last event it holds as `event_seq`.

Crash safety and readers: each line is one `write` of an `O_APPEND` file, so a crash leaves at most a
torn last line, which readers skip. A reader reads this file *before* `manifest.json` and applies only
the events after the manifest's `event_seq`: a compaction between the two reads (the whole file
replaced, then this one removed) leaves a manifest that already holds every event the reader saw, so it
sees the campaign as it was at one moment, never half of a compaction. An event sets fields to values
(never adds to them), so applying one twice changes nothing.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import cast

EVENTS = "manifest.events.jsonl"

# run name -> its changed fields, merged in the order they happened
RunChanges = dict[str, dict[str, object]]


def events_path(manifest_path: Path) -> Path:
    return manifest_path.with_name(EVENTS)


def append_events(path: Path, first_seq: int, changes: Mapping[str, Mapping[str, object]]) -> int:
    """Appends one line per run (numbered from `first_seq`) in one write; returns the last number used."""
    lines: list[str] = []
    seq = first_seq - 1
    for run_name, fields in changes.items():
        seq += 1
        lines.append(json.dumps({"seq": seq, "run": run_name, "set": dict(fields)}, default=str) + "\n")
    if lines:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, "".join(lines).encode())
        finally:
            os.close(fd)
    return seq


def read_event_text(path: Path) -> str:
    """The file's text as it is now ("" when there is none: nothing changed since the last compaction)."""
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return ""


def changes_after(text: str, after_seq: int) -> tuple[RunChanges, int]:
    """The run changes of the events numbered past `after_seq`, merged per run, and the last number seen
    (`after_seq` when none); a torn or foreign line is skipped."""
    merged: RunChanges = {}
    last = after_seq
    for line in text.splitlines():
        event = _parse(line)
        if event is None or event[0] <= after_seq:
            continue
        seq, run_name, fields = event
        merged.setdefault(run_name, {}).update(fields)
        last = max(last, seq)
    return merged, last


def _parse(line: str) -> tuple[int, str, dict[str, object]] | None:
    try:
        data: object = json.loads(line)
    except json.JSONDecodeError:
        return None
    if not isinstance(data, dict):
        return None
    event = cast("dict[str, object]", data)
    seq, run_name, fields = event.get("seq"), event.get("run"), event.get("set")
    if not isinstance(seq, int) or not isinstance(run_name, str) or not isinstance(fields, dict):
        return None
    return seq, run_name, cast("dict[str, object]", fields)


def remove_events(path: Path) -> None:
    path.unlink(missing_ok=True)
