"""RunObserver and its implementations here: Arrow files, console, fan-out, null.

`RunObserver` (defined in the leaf module retrain_ray/logs/types.py, re-exported here) is the base
every observer inherits: no-op hooks that take `**info` keyword extras.

`ArrowRunObserver` writes `metrics.arrows`, `generations.arrows` and `eval.arrows` in the run
directory (new segments on resume) and compacts each to Parquet on `close()`; with `jsonl` (`[logging]
jsonl`, on by default) it also mirrors every metrics row to `metrics.jsonl` (retrain_ray/logs/jsonl.py). `MultiObserver`
calls every observer even when one raises, then re-raises the first error.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa

from retrain_ray.logs.jsonl import JsonlMirror
from retrain_ray.logs.schemas import EVAL_SCHEMA, GENERATIONS_SCHEMA, METRICS_SCHEMA, row_to_record
from retrain_ray.logs.stream import ArrowStreamWriter, compact_to_parquet, segment_paths
from retrain_ray.logs.types import MetricsRow, RunObserver

__all__ = ["ArrowRunObserver", "ConsoleObserver", "MultiObserver", "NullObserver", "RunObserver"]

STREAMS: dict[str, pa.Schema] = {"metrics": METRICS_SCHEMA, "generations": GENERATIONS_SCHEMA, "eval": EVAL_SCHEMA}


class NullObserver(RunObserver):
    """Discards everything (every hook is the base's no-op)."""


class ArrowRunObserver(RunObserver):
    """Writes a run's metrics, generations and eval rows to Arrow streams; Parquet on close."""

    def __init__(self, run_dir: str | Path, run_name: str, *, fsync: bool = False, jsonl: bool = True) -> None:
        self.run_dir = Path(run_dir)
        self.run_name = run_name
        self.writers = {name: ArrowStreamWriter(self.run_dir / f"{name}.arrows", schema, fsync=fsync)
                        for name, schema in STREAMS.items()}
        self.jsonl = JsonlMirror(self.run_dir) if jsonl else None

    def _record(self, row: MetricsRow, name: str) -> dict[str, Any]:
        return row_to_record({"run": self.run_name, **row}, STREAMS[name])

    def on_step(self, row: MetricsRow, **info: Any) -> None:
        stamped = {"wall_time": dt.datetime.now(dt.timezone.utc), **row}
        records = [self._record(stamped, "metrics")]
        self.writers["metrics"].write_rows(records)
        if self.jsonl is not None:
            self.jsonl.write_records(records)

    def on_generations(self, rows: list[MetricsRow], **info: Any) -> None:
        self.writers["generations"].write_rows([self._record(row, "generations") for row in rows])

    def on_eval(self, row: MetricsRow, **info: Any) -> None:
        self.writers["eval"].write_rows([self._record(row, "eval")])

    def on_checkpoint(self, step: int, directory: Path, **info: Any) -> None:
        """Nothing to do: every row is already on disk when its call returns."""

    def close(self, **info: Any) -> None:
        if self.jsonl is not None:
            self.jsonl.close()
        for name, writer in self.writers.items():
            writer.close()
            if segment_paths(self.run_dir, name):
                compact_to_parquet(self.run_dir, name)


class ConsoleObserver(RunObserver):
    """Prints one compact line every `log_every` steps (and every eval) with rich."""

    def __init__(self, log_every: int = 1, console: Any = None, run_name: str = "") -> None:
        # deferred: loads rich, which importing this module does not need
        from rich.console import Console

        if log_every < 1:
            raise ValueError(f"ConsoleObserver log_every must be >= 1, got {log_every}")
        self.log_every = log_every
        self.console = console or Console()
        self.prefix = f"[bold]{run_name}[/bold] " if run_name else ""

    def on_step(self, row: MetricsRow, **info: Any) -> None:
        step = int(row.get("step", 0))
        if step % self.log_every:
            return
        phase = row.get("phase", "rl")
        self.console.print(
            f"{self.prefix}{phase} step {step:>5} | reward {_fmt(row.get('mean_reward'), '.3f')} | "
            f"correct {_fmt(row.get('correct_rate'), '.2f')} | {_fmt(row.get('tokens_per_second'), ',.0f')} tok/s | "
            f"loss {_fmt(row.get('loss'), '.4f')}"
        )

    def on_eval(self, row: MetricsRow, **info: Any) -> None:
        self.console.print(
            f"{self.prefix}eval step {int(row.get('step', 0)):>5} | reward {_fmt(row.get('eval_mean_reward'), '.3f')} | "
            f"correct {_fmt(row.get('eval_correct_rate'), '.2f')} | n={row.get('num_examples', '-')}"
        )


def _fmt(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)


class MultiObserver(RunObserver):
    """Fans every call out to all observers; one failing does not stop the others."""

    def __init__(self, *observers: RunObserver) -> None:
        self.observers = list(observers)

    def _each(self, call: Callable[[RunObserver], None]) -> None:
        errors = []
        for observer in self.observers:
            try:
                call(observer)
            except Exception as exc:
                errors.append(exc)
        if errors:
            raise errors[0]

    def on_step(self, row: MetricsRow, **info: Any) -> None:
        self._each(lambda o: o.on_step(row, **info))

    def on_generations(self, rows: list[MetricsRow], **info: Any) -> None:
        self._each(lambda o: o.on_generations(rows, **info))

    def on_eval(self, row: MetricsRow, **info: Any) -> None:
        self._each(lambda o: o.on_eval(row, **info))

    def on_checkpoint(self, step: int, directory: Path, **info: Any) -> None:
        self._each(lambda o: o.on_checkpoint(step, directory, **info))

    def close(self, **info: Any) -> None:
        self._each(lambda o: o.close(**info))
