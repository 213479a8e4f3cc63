"""`manifest.json`: the campaign's own record, kept current while it runs (atomic rewrites).

It holds the config snapshot (secrets redacted), the run matrix, each run's status, attempts and
result, the package versions and where the driver ran. The original (spec 5.2) wrote a manifest
per phase with `returncode` only; here every state change of a run rewrites it, and `status` reads
failures from it (the original never counted them, hazard 13.6).

This module is the only one that reads or writes the file. In memory the manifest is frozen records
(`CampaignRecord` with its `RunRecord`s, `SessionRecord`s and, for an adaptive campaign, its
`AdaptiveRecord`); a change is a new record (`with_run`, `model_copy(update=...)`). The file on disk
keeps its JSON shape: a record writes back exactly the keys it was read or built with (keys unknown to
this version are kept; keys an older manifest lacks load as the field's default and are not added).
The driver holds a `Manifest`, which records each change on disk at once: a run's change as a line appended
to `manifest.events.jsonl` (logs/manifest_events.py), folded into the whole file every so many events, at
each campaign-level change and when the campaign ends. `read_manifest` folds the pending events in, so a
reader always sees every recorded change.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Literal, Self, cast, get_args

from pydantic import BaseModel, ConfigDict, JsonValue, ValidationError

from retrain_ray.logs.manifest_events import (
    RunChanges,
    append_events,
    changes_after,
    events_path,
    read_event_text,
    remove_events,
)

MANIFEST = "manifest.json"
# "stopped": an adaptive campaign stopped the run's condition at a rung (campaign/adaptive.py); its
# entry says why (`stop_reason`) and it is never run again
RunState = Literal["pending", "running", "completed", "failed", "stopped"]
RUN_STATES: tuple[RunState, ...] = get_args(RunState)
CampaignState = Literal["pending", "running", "done", "partial", "interrupted"]
# a value Tune reported, as the manifest keeps it (campaign/tracking.py keeps numbers and strings only)
ResultValue = bool | int | float | str
_PACKAGES = ("retrain-ray", "ray", "torch", "transformers", "peft", "pyarrow", "pydantic")


def _now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class _Record(BaseModel):
    """Frozen; keys this version does not know are kept (and written back)."""

    model_config = ConfigDict(frozen=True, extra="allow")


class RunRecord(_Record):
    """One run of the matrix: what it is (condition, seed, overrides, directory) and how it went."""

    run_name: str
    condition: str = ""
    seed: int = 0
    overrides: dict[str, JsonValue] = {}
    run_dir: str = ""
    placement: str = ""  # "" or the split placement's mode
    max_steps: int = 0
    status: RunState = "pending"
    attempts: int = 0
    result: dict[str, ResultValue] = {}  # the run's last report to Tune
    error: str = ""  # its last error lines (a retried run keeps the latest)
    started_at: float | None = None
    finished_at: float | None = None
    checkpoint: str = ""  # the last checkpoint it reported to Tune (a path on Tune's storage)
    # an adaptive campaign (campaign/adaptive.py): the run's value at each rung, why it stopped, whether it
    # was added as a seed of an undecided condition
    rung_values: dict[str, float] = {}
    stop_reason: str = ""
    stopped_at: float | None = None
    added: bool = False
    add_reason: str = ""
    # what the run holds while it runs (campaign/plan.py): its GPUs (a packed run's share of one, e.g. 0.25
    # with runs_per_gpu = 4; 0 on CPU) and CPUs. None: a manifest written before they were recorded
    gpus: float | None = None
    cpus: float | None = None

    @property
    def last_step(self) -> int:
        """The last step it reported (-1: none)."""
        step = self.result.get("step", -1)
        return int(step) if isinstance(step, (int, float)) else -1


class SessionRecord(_Record):
    """One driver session (a start or a resume)."""

    host: str = ""
    pid: int = 0
    started: float = 0.0
    process_started_at: float = 0.0  # the driver process's own start (explain --calibrate)


class StoppedCondition(_Record):
    condition: str
    reason: str = ""


class Decision(_Record):
    """An adaptive campaign's decision at a rung (campaign/adaptive.py)."""

    step: int
    at: float = 0.0
    leader: str | None = None
    seeds: dict[str, int] = {}
    values: dict[str, list[float]] = {}
    stopped: tuple[StoppedCondition, ...] = ()
    added: tuple[str, ...] = ()
    comparisons: tuple[dict[str, JsonValue], ...] = ()


class AdaptiveRecord(_Record):
    plan: dict[str, JsonValue] = {}  # campaign/adaptive_plan.py AdaptivePlan.to_json()
    decisions: tuple[Decision, ...] = ()
    finished: str = ""  # why it decided no more ("" while it still decides)


class CampaignRecord(_Record):
    """The whole manifest."""

    name: str = ""
    campaign_dir: str = ""
    campaign_toml: str = ""
    conditions: tuple[str, ...] = ()
    seeds: tuple[int, ...] = ()
    max_steps: int = 0
    num_runs: int = 0
    max_concurrent: int = 1
    stagger_seconds: float = 0.0
    max_failures: int = 0
    config: dict[str, JsonValue] | None = None  # the config snapshot, secrets redacted
    adaptive: AdaptiveRecord | None = None
    status: CampaignState = "pending"
    created: str = ""
    packages: dict[str, str] = {}
    runs: tuple[RunRecord, ...]
    updated: str = ""
    sessions: tuple[SessionRecord, ...] = ()
    counts: dict[str, int] = {}
    extended: tuple[dict[str, JsonValue], ...] = ()  # each raised max_steps (campaign/edits.py)
    squeeze: dict[str, JsonValue] | None = None  # campaign/afterwards.py
    summary: dict[str, JsonValue] | None = None
    compute: dict[str, JsonValue] | None = None  # GPU- and CPU-hours spent and saved (results/compute.py)
    event_seq: int = 0  # the last run event (logs/manifest_events.py) this file holds

    def run(self, run_name: str) -> RunRecord:
        for entry in self.runs:
            if entry.run_name == run_name:
                return entry
        raise KeyError(f"no run {run_name!r} in campaign {self.name!r}; runs: {[r.run_name for r in self.runs]}")

    def with_run(self, run_name: str, **changes: object) -> Self:
        """A copy with one run changed (`changes`: RunRecord fields)."""
        status = changes.get("status")
        if status is not None and status not in RUN_STATES:
            raise ValueError(f"run status {status!r} not in {RUN_STATES}")
        self.run(run_name)
        runs = tuple(r.model_copy(update=changes) if r.run_name == run_name else r for r in self.runs)
        return self.model_copy(update={"runs": runs})

    def with_runs(self, changes: RunChanges) -> Self:
        """A copy with several runs changed in one pass (`changes`: run name -> RunRecord fields); a name not
        in the campaign is skipped (an event of a run that a later whole write no longer holds)."""
        for fields in changes.values():
            status = fields.get("status")
            if status is not None and status not in RUN_STATES:
                raise ValueError(f"run status {status!r} not in {RUN_STATES}")
        runs = tuple(r.model_copy(update=changes[r.run_name]) if r.run_name in changes else r for r in self.runs)
        return self.model_copy(update={"runs": runs})

    @classmethod
    def load(cls, path: Path) -> CampaignRecord:
        """The manifest at `path`; a clear error for a missing, damaged or foreign file."""
        if not path.is_file():
            raise FileNotFoundError(f"{path} not found: {path.parent} is not a retrain-ray campaign directory")
        try:
            data: object = json.loads(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(damaged_manifest(path, f"not valid JSON ({exc}), half-written or edited")) from None
        if not isinstance(data, dict):
            raise ValueError(damaged_manifest(path, f"a JSON {type(data).__name__}, not an object"))
        runs = cast(dict[str, object], data).get("runs")
        if not isinstance(runs, list):
            what = "no \"runs\" list" if runs is None else f"\"runs\" is a {type(runs).__name__}, not a list"
            raise ValueError(damaged_manifest(path, what))
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
            raise ValueError(f"{path} is not a retrain-ray manifest ({problems})") from None

    def write(self, path: Path, run_lines: RunLines | None = None) -> None:
        """Atomically (a reader never sees half a file); only the keys it was read or built with. Indented,
        one line per run; `run_lines` keeps each run's line while its entry is unchanged (`manifest_text`)."""
        write_text_atomic(path, manifest_text(self, {} if run_lines is None else run_lines))


# id(run entry) -> (that entry, its JSON line): a line is reused only for the very entry it was made from
RunLines = dict[int, tuple["RunRecord", str]]
_RUNS_HERE = "\0runs\0"  # where the run lines go in the indented header (no manifest value is this string)


def manifest_text(record: CampaignRecord, run_lines: RunLines) -> str:
    """The manifest's JSON text. At a thousand runs it is megabytes, written at each status change: the
    header is indented (Python's indenting encoder is pure Python), each run a compact line, encoded again
    only when its entry changed (entries are immutable; a change makes a new one). Updates `run_lines`."""
    lines: RunLines = {}
    for run in record.runs:
        cached = run_lines.get(id(run))
        line = cached[1] if cached is not None and cached[0] is run else \
            json.dumps(run.model_dump(exclude_unset=True), default=str)
        lines[id(run)] = (run, line)
    run_lines.clear()
    run_lines.update(lines)
    head = json.dumps({**record.model_dump(exclude_unset=True, exclude={"runs"}), "runs": _RUNS_HERE},
                      indent=2, default=str)
    runs = "[\n    " + ",\n    ".join(line for _, line in lines.values()) + "\n  ]" if lines else "[]"
    return head.replace(json.dumps(_RUNS_HERE), runs, 1)


def damaged_manifest(path: Path, what: str) -> str:
    """The message for a manifest that cannot be a campaign's: named as damaged, with the way out."""
    return f"the manifest {path} is damaged: {what}; restore it or move the directory aside"


def package_versions() -> dict[str, str]:
    versions: dict[str, str] = {}
    for name in _PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def write_json_atomic(path: Path, data: object) -> None:
    write_text_atomic(path, json.dumps(data, indent=2, default=str))


def write_text_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def read_manifest(campaign_dir: Path) -> CampaignRecord:
    """The manifest with the run events not yet folded into it (the events are read first: see
    logs/manifest_events.py for why that order sees one moment of the campaign)."""
    return _read_with_events(Path(campaign_dir) / MANIFEST)[0]


def _read_with_events(path: Path) -> tuple[CampaignRecord, int]:
    """The record with its pending events applied, and the last event number seen."""
    text = read_event_text(events_path(path))
    record = CampaignRecord.load(path)
    changes, last = changes_after(text, record.event_seq)
    return (record.with_runs(changes) if changes else record), last


def new_run(entry: RunRecord | Mapping[str, object]) -> RunRecord:
    """A run's entry as a new campaign (or an added seed) records it: pending, no attempt, no result."""
    fields = entry.model_dump(exclude_unset=True) if isinstance(entry, RunRecord) else dict(entry)
    return RunRecord.model_validate({**fields, "status": "pending", "attempts": 0, "result": {}, "error": ""})


# A run event log is folded into the whole file after this many events, or as many as the campaign has runs
# when it has more: a whole write costs the size of the manifest, so writes per run stay constant.
COMPACT_EVERY = 64


class Manifest:
    """The driver's manifest: the current record and its file. A run's change (`update_run`) is appended to
    the event log at once; a running run's progress (`stage_run`, each Tune report) waits for the next
    append or `flush_if_due`. The whole file is written by `save`: at each campaign-level change (`update`)
    and after `compact_every` events (default: `COMPACT_EVERY`, or the run count when larger)."""

    def __init__(self, path: Path, record: CampaignRecord, *, seq: int | None = None,
                 compact_every: int | None = None) -> None:
        self.path = path
        self.record = record
        self.seq = record.event_seq if seq is None else seq  # the last event number written
        self.compact_every = compact_every or max(COMPACT_EVERY, len(record.runs))
        self.staged: RunChanges = {}  # run changes in `record` not yet on disk
        self.events_since_save = 0
        self.saved_at = 0.0  # time.monotonic() of the last write of either file
        self.run_lines: RunLines = {}  # each unchanged run's JSON line, reused at the next write

    @classmethod
    def create(cls, campaign_dir: Path, header: Mapping[str, object],
               runs: Sequence[RunRecord | Mapping[str, object]]) -> Manifest:
        record = CampaignRecord.model_validate({
            **header, "status": "pending", "created": _now_iso(), "packages": package_versions(), "runs": [],
        })
        remove_events(events_path(campaign_dir / MANIFEST))  # a leftover of a directory made afresh
        manifest = cls(campaign_dir / MANIFEST, record.model_copy(update={"runs": tuple(new_run(r) for r in runs)}))
        manifest.save()
        return manifest

    @classmethod
    def load(cls, campaign_dir: Path) -> Manifest:
        path = Path(campaign_dir) / MANIFEST
        record, seq = _read_with_events(path)
        return cls(path, record, seq=seq)

    def save(self) -> None:
        """Writes the whole file (atomically), holding every event so far, then drops the event log."""
        self.record = self.record.model_copy(update={"updated": _now_iso(), "event_seq": self.seq})
        self.record.write(self.path, self.run_lines)
        remove_events(events_path(self.path))
        self.staged, self.events_since_save, self.saved_at = {}, 0, time.monotonic()

    def stage_run(self, run_name: str, **changes: object) -> None:
        """Changes a run's entry in memory only; the next append (`update_run`, `flush_if_due`) carries it."""
        self.record = self.record.with_run(run_name, **changes)
        self.staged.setdefault(run_name, {}).update(changes)

    def flush_if_due(self, every_s: float) -> None:
        """Appends staged changes when the last write is at least `every_s` old."""
        if self.staged and time.monotonic() - self.saved_at >= every_s:
            self._append_staged()

    def _append_staged(self) -> None:
        count = len(self.staged)
        self.seq = append_events(events_path(self.path), self.seq + 1, self.staged)
        self.staged, self.saved_at = {}, time.monotonic()
        self.events_since_save += count
        if self.events_since_save >= self.compact_every:
            self.save()

    def run(self, run_name: str) -> RunRecord:
        return self.record.run(run_name)

    def update(self, **changes: object) -> None:
        """Changes campaign-level fields (CampaignRecord's) and writes."""
        self.record = self.record.model_copy(update=changes)
        self.save()

    def update_run(self, run_name: str, **changes: object) -> None:
        """Changes a run's entry and records it at once (one appended event line)."""
        self.stage_run(run_name, **changes)
        self._append_staged()

    def add_run(self, entry: RunRecord) -> None:
        self.update(runs=(*self.record.runs, new_run(entry)))

    def start_session(self) -> None:
        """Records a driver session (first start or resume): host, pid, time."""
        # deferred: filelock, which readers never need
        from retrain_ray.logs.dir_lock import process_started_at

        session = SessionRecord(host=socket.gethostname(), pid=os.getpid(), started=time.time(),
                                process_started_at=process_started_at() or 0.0)
        self.update(sessions=(*self.record.sessions, session), status="running")

    def finish(self) -> None:
        states = [r.status for r in self.record.runs]
        status = "done" if all(s in ("completed", "stopped") for s in states) else "partial"
        self.update(status=status, counts={s: states.count(s) for s in RUN_STATES})
