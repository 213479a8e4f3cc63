"""Data: built-in verifiable tasks, local JSONL/Parquet files, the MATH dataset, round-robin batches."""

from retrain_ray.data.builtin import TASKS, get_task, load_task
from retrain_ray.data.files import load_file_examples
from retrain_ray.data.loading import (
    MATH_SUBJECTS,
    SOURCES,
    DataUnavailableError,
    load_examples,
    load_examples_from_config,
    load_math_examples,
    next_batch,
)
from retrain_ray.data.types import Example, TaskData, TaskSpec

__all__ = [
    "MATH_SUBJECTS",
    "SOURCES",
    "TASKS",
    "DataUnavailableError",
    "Example",
    "TaskData",
    "TaskSpec",
    "get_task",
    "load_examples",
    "load_examples_from_config",
    "load_file_examples",
    "load_math_examples",
    "load_task",
    "next_batch",
]
