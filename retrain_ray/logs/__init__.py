"""Run logs: Arrow IPC streams while a run is live, Parquet when it ends, and the run observers.

Names are imported lazily (PEP 562): the CLI front and the progress bar import `retrain_ray.logs.types`
(the observer base), which must not load pyarrow on the way to a run's first step.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what type checkers see; at run time __getattr__ imports on first use
    from retrain_ray.logs.observers import (
        ArrowRunObserver,
        ConsoleObserver,
        MultiObserver,
        NullObserver,
        RunObserver,
        select_generation_samples,
        top_indices_by_reward,
        top_surprisal_tokens,
    )
    from retrain_ray.logs.schemas import EVAL_SCHEMA, GENERATIONS_SCHEMA, METRICS_SCHEMA, row_to_record
    from retrain_ray.logs.stream import (
        ArrowStreamWriter,
        compact_to_parquet,
        read_stream,
        segment_paths,
        write_run_meta,
    )

_EXPORTS = {
    "compact_to_parquet": "stream",
    "write_run_meta": "stream",
    "select_generation_samples": "observers",
    "top_indices_by_reward": "observers",
    "top_surprisal_tokens": "observers",
    "ArrowRunObserver": "observers",
    "ConsoleObserver": "observers",
    "MultiObserver": "observers",
    "NullObserver": "observers",
    "RunObserver": "observers",
    "EVAL_SCHEMA": "schemas",
    "GENERATIONS_SCHEMA": "schemas",
    "METRICS_SCHEMA": "schemas",
    "row_to_record": "schemas",
    "ArrowStreamWriter": "stream",
    "read_stream": "stream",
    "segment_paths": "stream",
}

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
    "top_surprisal_tokens",
    "write_run_meta",
]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'retrain_ray.logs' has no attribute {name!r}")
    return getattr(importlib.import_module(f"retrain_ray.logs.{_EXPORTS[name]}"), name)
