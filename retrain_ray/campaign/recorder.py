"""Recorder: every run's rows reach the campaign directory on the driver's machine as Arrow streams.

`RecorderActor` is an async control actor (`num_cpus=0`) pinned to the driver's node with a
NodeAffinitySchedulingStrategy, so rows of runs executing on other nodes still land in the driver's
campaign directory: `<campaign_dir>/runs/<run>/<kind>.arrows` (kind: metrics, generations, eval).
Each actor lifetime writes a new stream *segment* per run and kind (`metrics.arrows`,
`metrics.1.arrows`, ...), because an Arrow IPC stream cannot be reopened for append; readers read
all segments and de-duplicate on (run, step), last write wins, so a step re-run after a retry or a
campaign resume appears exactly once. A run that resumes asks the recorder first to cut a torn
segment (a recorder killed mid-write) back to its complete batches (`repair_metrics`), and resumes at
or before the last step it still holds (campaign/trial.py).

The recorder also mirrors each run's metrics rows to `<run>/metrics.jsonl` as it writes them (unless the
run's `[logging] jsonl` is false), de-duplicated on resume like the streams (retrain_ray/logs/observers.py).

Every `parquet_every_s` seconds per run, and when a run closes, the recorder also rewrites
`<run>/<kind>.parquet` (de-duplicated, with campaign/run/condition/seed columns) atomically, so
pandas, polars and DuckDB can read a running campaign (retrain_ray/logs/parquet_export.py).

`RecorderClient` is the run-side RunObserver: it buffers rows and sends them in batches without
waiting (`append.remote`), and waits (with a timeout) for everything in flight at each checkpoint
and at close, so every step up to a checkpoint is on disk before Tune records that checkpoint.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol, cast

import ray
from ray import ObjectRef
from ray.actor import ActorHandle
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from retrain_ray.actors.restarts import CONTROL_RESTARTS, record_restart
from retrain_ray.actors.worker_env import SERVICE_RUNTIME_ENV
from retrain_ray.logs import EVAL_SCHEMA, GENERATIONS_SCHEMA, METRICS_SCHEMA, ArrowStreamWriter, row_to_record  # pyright: ignore[reportUnknownVariableType]  # pyarrow schemas: no stubs
from retrain_ray.logs.observers import JsonlMirror
from retrain_ray.logs.parquet_export import (
    campaign_name,
    export_backpressure,
    export_run,
    run_identities,
)
from retrain_ray.logs.stream import logged_through, repair_and_last_step
from retrain_ray.logs.types import MetricsRow, RunObserver

RECORDER_KINDS = ("metrics", "generations", "eval")
PARQUET_EVERY_S = 10.0
log = logging.getLogger(__name__)


def _schema(kind: str) -> object:
    """The `pyarrow.Schema` of a row kind."""
    schemas: dict[str, object] = {"metrics": METRICS_SCHEMA, "generations": GENERATIONS_SCHEMA, "eval": EVAL_SCHEMA}
    return schemas[kind]


def _to_record(kind: str, row: MetricsRow) -> dict[str, object]:
    if kind == "metrics":
        return cast("dict[str, object]", row_to_record(dict(row)))  # pyright: ignore[reportUnknownArgumentType]
    names = cast("list[str]", getattr(_schema(kind), "names"))  # noqa: B009  # a pyarrow Schema, untyped
    return {name: row.get(name) for name in names}


class RecorderCore:
    """Plain-Python state of the recorder: one open Arrow stream writer per (run, kind)."""

    def __init__(self, campaign_dir: str | Path, *, parquet_every_s: float = PARQUET_EVERY_S) -> None:
        self.campaign_dir = Path(campaign_dir)
        self.parquet_every_s = parquet_every_s
        self._writers: dict[tuple[str, str], ArrowStreamWriter] = {}
        self._mirrors: dict[str, JsonlMirror] = {}
        self._exported_at: dict[str, float] = {}
        self.rows_written: dict[str, int] = {}
        # each run's condition and seed, and the campaign's name, from the manifest: read again only for a run
        # not seen yet (a seed an adaptive campaign added). Reading the manifest at each export was a parse of
        # 3 MB per run per PARQUET_EVERY_S at 1,000 runs, on the cores the runs use.
        self._identities: dict[str, dict[str, object]] = {}
        self._campaign = ""

    def _writer(self, run: str, kind: str) -> ArrowStreamWriter:
        key = (run, kind)
        if key not in self._writers:
            run_dir = self.campaign_dir / "runs" / run
            run_dir.mkdir(parents=True, exist_ok=True)
            self._writers[key] = ArrowStreamWriter(run_dir / f"{kind}.arrows", _schema(kind))  # a new segment
        return self._writers[key]

    def append(self, run: str, kind: str, rows: Sequence[MetricsRow], *, jsonl: bool = True) -> int:
        """Writes `rows` of `kind` for `run`; metrics rows also go to its `metrics.jsonl` when `jsonl`."""
        if kind not in RECORDER_KINDS:
            raise ValueError(f"recorder: unknown row kind {kind!r}; expected one of {RECORDER_KINDS}")
        if not rows:
            return 0
        records = [_to_record(kind, {**r, "run": run}) for r in rows]
        self._writer(run, kind).write_rows(records)
        if kind == "metrics" and jsonl:
            self._mirror(run).write_records(records)
        self.rows_written[run] = self.rows_written.get(run, 0) + len(records)
        if time.monotonic() - self._exported_at.get(run, 0.0) >= self.parquet_every_s:
            self.export_parquet(run)
        return len(records)

    def _mirror(self, run: str) -> JsonlMirror:
        if run not in self._mirrors:
            self._mirrors[run] = JsonlMirror(self.campaign_dir / "runs" / run)
        return self._mirrors[run]

    def export_parquet(self, run: str) -> None:
        """Rewrites the run's Parquet copies (and the campaign's back-pressure one); never raises:
        the Arrow streams stay the record, a failed copy is retried at the next export."""
        self._exported_at[run] = time.monotonic()
        try:
            if run not in self._identities:
                self._identities = run_identities(self.campaign_dir)
                self._campaign = campaign_name(self.campaign_dir)
            export_run(self.campaign_dir / "runs" / run, self._campaign, self._identities.get(run, {}))
            export_backpressure(self.campaign_dir, self._campaign)
        except Exception as exc:  # a copy only; the streams hold every row
            log.warning("recorder: Parquet copy of run %s failed (%s); the Arrow streams are complete", run, exc)

    def close_run(self, run: str, *, export: bool = True) -> None:
        mirror = self._mirrors.pop(run, None)
        if mirror is not None:
            mirror.close()
        for kind in RECORDER_KINDS:
            writer = self._writers.pop((run, kind), None)
            if writer is not None:
                writer.close()
        if export and run in self.rows_written:
            self.export_parquet(run)

    def repair_metrics(self, run: str) -> int | None:
        """At a run's resume: closes the run's open segments (a writer of its previous attempt), cuts
        torn metrics segments back to their complete batches and returns the last step still logged
        (None: nothing was torn; -1: no row left), so the run resumes at or before it."""
        run_dir = self._closed_run_dir(run)
        return repair_and_last_step(run_dir, "metrics") if run_dir else None

    def logged_through(self, run: str) -> int:
        """At a resume from the run's own checkpoints (Tune has none to give): closes the run's open
        segments, repairs torn ones and returns the last step logged with every step before it (-1: none)."""
        run_dir = self._closed_run_dir(run)
        return logged_through(run_dir, "metrics") if run_dir else -1

    def _closed_run_dir(self, run: str) -> Path | None:
        """Closes the run's open segments (a writer of its previous attempt); its directory, None when absent."""
        self.close_run(run, export=False)
        run_dir = self.campaign_dir / "runs" / run
        return run_dir if run_dir.is_dir() else None

    def close(self) -> None:
        for run in {r for r, _ in list(self._writers)}:
            self.close_run(run)


@ray.remote(num_cpus=0, max_concurrency=64, runtime_env=SERVICE_RUNTIME_ENV,  # pyright: ignore[reportCallIssue, reportUntypedClassDecorator]  # ray's overloads omit max_concurrency
            max_restarts=CONTROL_RESTARTS, max_task_retries=-1)
class RecorderActor:
    """Async Ray host of `RecorderCore`. Methods run one at a time on the actor's event loop.

    A recorder that dies (a `kill -9`, its process OOM-killed) is restarted by Ray up to `CONTROL_RESTARTS`
    times with the same campaign directory, and the calls in flight are retried on the new one: its state
    is on disk (the streams; a new lifetime writes new segments and readers de-duplicate on (run, step),
    a torn tail is dropped and its rows come again with the retried call), so the runs go on. Each restart
    is recorded in `<campaign_dir>/control_restarts.jsonl`, which the driver reports (campaign/experiment.py).
    """

    def __init__(self, campaign_dir: str) -> None:
        self._core = RecorderCore(campaign_dir)
        if ray.get_runtime_context().was_current_actor_reconstructed:  # pyright: ignore[reportUnknownMemberType]
            record_restart(Path(campaign_dir), "recorder")

    async def append(self, run: str, kind: str, rows: list[dict[str, object]], jsonl: bool = True) -> int:
        return self._core.append(run, kind, rows, jsonl=jsonl)

    async def close_run(self, run: str) -> None:
        self._core.close_run(run)

    async def close(self) -> None:
        self._core.close()

    async def repair_metrics(self, run: str) -> int | None:
        return self._core.repair_metrics(run)

    async def logged_through(self, run: str) -> int:
        return self._core.logged_through(run)

    async def rows_written(self) -> dict[str, int]:
        return dict(self._core.rows_written)

    async def ping(self) -> str:
        return ray.get_runtime_context().get_node_id()

    async def pid(self) -> int:
        """The actor's process id (what a fault test or an operator's `kill` needs)."""
        return os.getpid()


def recorder_name(campaign: str) -> str:
    return f"{campaign}/recorder"


def start_recorder(campaign: str, campaign_dir: Path, *, namespace: str, timeout_s: float = 60.0) -> ActorHandle[object]:
    """Starts (or finds) the campaign's recorder on the driver's node and waits until it answers."""
    node_id = ray.get_runtime_context().get_node_id()
    handle = RecorderActor.options(  # pyright: ignore[reportAttributeAccessIssue, reportUnknownMemberType, reportUnknownVariableType]  # an @ray.remote class
        name=recorder_name(campaign),
        namespace=namespace,
        get_if_exists=True,
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node_id, soft=False),
    ).remote(str(campaign_dir))
    ray.get(handle.ping.remote(), timeout=timeout_s)  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType]
    return cast("ActorHandle[object]", handle)


class _RemoteMethod(Protocol):
    def remote(self, *args: object) -> ObjectRef[object]: ...


class _RecorderHandle(Protocol):
    """The recorder actor's methods a client calls (`RecorderActor`)."""

    append: _RemoteMethod
    close_run: _RemoteMethod


class RecorderClient(RunObserver):
    """RunObserver forwarding rows to the recorder actor: batched, non-blocking, flushed at checkpoints.

    Picklable only before first use (holds an actor handle and a buffer); build one per run attempt.
    """

    def __init__(
        self,
        handle: object,
        run: str,
        *,
        batch_rows: int = 16,
        flush_interval_s: float = 2.0,
        timeout_s: float = 60.0,
        extra: Mapping[str, object] | None = None,
        jsonl: bool = True,
    ) -> None:
        self._handle = cast("_RecorderHandle", handle)  # a Ray actor handle: its methods are untyped
        self._jsonl = jsonl
        self._run = run
        self._batch_rows = batch_rows
        self._flush_interval_s = flush_interval_s
        self._timeout_s = timeout_s
        self._extra = dict(extra or {})
        self._buffers: dict[str, list[dict[str, object]]] = {k: [] for k in RECORDER_KINDS}
        self._in_flight: list[ObjectRef[object]] = []
        self._last_send = time.monotonic()

    def _add(self, kind: str, rows: Sequence[MetricsRow]) -> None:
        self._buffers[kind].extend({**self._extra, **r} for r in rows)
        due = time.monotonic() - self._last_send >= self._flush_interval_s
        if due or sum(len(b) for b in self._buffers.values()) >= self._batch_rows:
            self._send()

    def _send(self) -> None:
        for kind, rows in self._buffers.items():
            if rows:
                self._in_flight.append(self._handle.append.remote(self._run, kind, rows, self._jsonl))
                self._buffers[kind] = []
        self._last_send = time.monotonic()
        done, self._in_flight = ray.wait(self._in_flight, num_returns=len(self._in_flight), timeout=0)  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
        ray.get(done)  # pyright: ignore[reportUnknownArgumentType]  # surfaces a recorder error (bad row) early, without waiting

    def flush(self) -> None:
        """Sends what is buffered and waits until the recorder has written it (or times out)."""
        self._send()
        if self._in_flight:
            ray.get(self._in_flight, timeout=self._timeout_s)
        self._in_flight = []

    def on_step(self, row: MetricsRow, **info: object) -> None:
        self._add("metrics", [row])

    def on_generations(self, rows: list[MetricsRow], **info: object) -> None:
        self._add("generations", rows)

    def on_eval(self, row: MetricsRow, **info: object) -> None:
        self._add("eval", [row])

    def on_checkpoint(self, step: int, directory: Path, **info: object) -> None:
        self.flush()

    def close(self, **info: object) -> None:
        """Flushes, then lets the recorder close the run's segments and write its Parquet copies."""
        self.flush()
        ray.get(self._handle.close_run.remote(self._run), timeout=self._timeout_s)
