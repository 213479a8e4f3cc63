"""Run logs: Arrow IPC streams while a run is live, Parquet when it ends, and the run observers."""

from retrain_ray.logs.compact import compact_to_parquet, write_run_meta
from retrain_ray.logs.generations import select_generation_samples, top_indices_by_reward
from retrain_ray.logs.observers import (
    ArrowRunObserver,
    ConsoleObserver,
    MultiObserver,
    NullObserver,
    RunObserver,
)
from retrain_ray.logs.schemas import EVAL_SCHEMA, GENERATIONS_SCHEMA, METRICS_SCHEMA, row_to_record
from retrain_ray.logs.stream import ArrowStreamWriter, read_stream, segment_paths

__all__ = [
    "EVAL_SCHEMA",
    "GENERATIONS_SCHEMA",
    "METRICS_SCHEMA",
    "ArrowRunObserver",
    "ArrowStreamWriter",
    "ConsoleObserver",
    "MultiObserver",
    "NullObserver",
    "RunObserver",
    "compact_to_parquet",
    "read_stream",
    "row_to_record",
    "segment_paths",
    "select_generation_samples",
    "top_indices_by_reward",
    "write_run_meta",
]
