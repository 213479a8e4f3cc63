"""One entry point for `[data]`: `load_examples(source, ...)` -> TaskData, and round-robin batching.

Sources are a registry (`SOURCES`): "builtin" (seeded generated tasks), "file" (JSONL/Parquet,
optional separate eval file) and "math" (MATH via `datasets`, online only, no eval split as in the
original). `next_batch` takes consecutive examples with wrap-around, as the original trainer does.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from retrain_ray.data.builtin import load_task
from retrain_ray.data.files import load_file_examples
from retrain_ray.data.types import Example, TaskData
from retrain_ray.rewards.boxed import extract_boxed

if TYPE_CHECKING:
    from retrain_ray.config.sections_runtime import DataSection
    from retrain_ray.config.sections_training import TrainingSection


@dataclass(frozen=True)
class DataRequest:
    """Every `[data]` knob; each source reads the ones it needs."""

    task: str
    level: int
    path: str
    prompt_column: str
    reference_column: str
    eval_path: str
    num_examples: int
    num_eval_examples: int
    max_examples: int
    seed: int


def _from_builtin(req: DataRequest) -> TaskData:
    """`num_examples` generated training examples; `max_examples` > 0 (`[training]`) keeps the first that many."""
    num_train = min(req.num_examples, req.max_examples) if req.max_examples > 0 else req.num_examples
    return load_task(req.task, level=req.level, seed=req.seed, num_train=num_train, num_eval=req.num_eval_examples)


def _from_file(req: DataRequest) -> TaskData:
    if not req.path:
        raise ValueError('[data] source = "file" needs path = "<file>.jsonl" or "<file>.parquet"')
    train = load_file_examples(req.path, req.prompt_column, req.reference_column, req.max_examples)
    evals: list[Example] = []
    if req.eval_path:
        evals = load_file_examples(req.eval_path, req.prompt_column, req.reference_column, req.num_eval_examples)
    return TaskData(train=train, eval=evals)


def _from_math(req: DataRequest) -> TaskData:
    return TaskData(train=load_math_examples(req.max_examples), eval=[])


SOURCES: dict[str, Callable[[DataRequest], TaskData]] = {
    "builtin": _from_builtin,
    "file": _from_file,
    "math": _from_math,
}


def load_examples(
    source: str,
    *,
    task: str = "first_digit",
    level: int = 1,
    path: str = "",
    prompt_column: str = "prompt",
    reference_column: str = "reference",
    eval_path: str = "",
    num_examples: int = 512,
    num_eval_examples: int = 64,
    max_examples: int = 0,
    seed: int = 0,
) -> TaskData:
    """Load a run's examples from `[data] source` in {"builtin", "file", "math"}."""
    loader = SOURCES.get(source)
    if loader is None:
        raise ValueError(f"unknown [data] source {source!r}; choose one of {sorted(SOURCES)}")
    request = DataRequest(
        task, level, path, prompt_column, reference_column, eval_path,
        num_examples, num_eval_examples, max_examples, seed,
    )
    data = loader(request)
    if not data.train:
        raise ValueError(f"[data] source = {source!r} produced no training examples; check path / max_examples")
    return data


def next_batch(examples: list[Example], example_idx: int, batch_size: int) -> tuple[list[Example], int]:
    """Take `batch_size` consecutive examples from `example_idx`, wrapping around; return the next index."""
    if not examples:
        raise ValueError("next_batch needs at least one example")
    batch = [examples[(example_idx + i) % len(examples)] for i in range(batch_size)]
    return batch, example_idx + batch_size


def load_examples_from_config(data: DataSection, training: TrainingSection) -> TaskData:
    """Load the `[data]` section's examples, with `training.max_examples` and `training.seed`.

    A seed of -1 (the original's "unseeded") generates built-in tasks with seed 0, so every run of a
    campaign that leaves the seed unset trains on the same examples.
    """
    return load_examples(
        data.source, task=data.task, level=data.level, path=data.path, prompt_column=data.prompt_column,
        reference_column=data.reference_column, eval_path=data.eval_path, num_examples=data.num_examples,
        num_eval_examples=data.num_eval_examples, max_examples=training.max_examples,
        seed=max(training.seed, 0),
    )


# The MATH dataset (`[data] source = "math"`), as the original's `data/math.py`.
#
# `datasets.load_dataset("EleutherAI/hendrycks_math", subject, split="train")` for five subjects in
# a fixed order; each row becomes `Example(problem, extract_boxed(solution))`; `max_examples > 0`
# truncates; no shuffling. Needs the optional `datasets` package and network access to the Hugging
# Face hub; offline, or without `datasets`, it fails with a message pointing at local files.
MATH_DATASET = "EleutherAI/hendrycks_math"
MATH_SUBJECTS = ("intermediate_algebra", "precalculus", "number_theory", "counting_and_probability", "geometry")
OFFLINE_HINT = (
    "Use local data instead: [data] source = \"file\" with path = \"problems.jsonl\" (or .parquet) and "
    "prompt_column / reference_column, or source = \"builtin\" with task = \"first_digit\"."
)


class DataUnavailableError(RuntimeError):
    """A data source cannot be reached from here; the message says what to use instead."""


def is_offline() -> bool:
    """Whether HF_HUB_OFFLINE / HF_DATASETS_OFFLINE forbid the download (the check pass asks it too)."""
    return any(os.environ.get(var, "").lower() in ("1", "true", "yes") for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"))


def load_math_examples(max_examples: int = 0) -> list[Example]:
    """Load the five MATH subjects in the original's order; truncate to `max_examples` if > 0."""
    if is_offline():
        raise DataUnavailableError(f"[data] source = \"math\" downloads {MATH_DATASET}, but HF_HUB_OFFLINE is set. {OFFLINE_HINT}")
    try:
        # deferred: datasets is an optional extra, imported only when used
        import datasets  # pyright: ignore[reportMissingImports]
    except ImportError as exc:
        raise DataUnavailableError(
            f"[data] source = \"math\" needs the `datasets` package (pip install 'retrain-ray[data]'). {OFFLINE_HINT}"
        ) from exc
    examples: list[Example] = []
    for subject in MATH_SUBJECTS:
        try:
            rows = datasets.load_dataset(MATH_DATASET, subject, split="train")
        except Exception as exc:
            raise DataUnavailableError(f"could not load {MATH_DATASET}/{subject} ({exc}). {OFFLINE_HINT}") from exc
        # datasets' stubs type a row as a column slice; each row here is a dict of strings.
        typed_rows = cast("Iterable[dict[str, str]]", rows)
        examples.extend(Example(row["problem"], extract_boxed(row["solution"])) for row in typed_rows)
        if 0 < max_examples <= len(examples):
            return examples[:max_examples]
    return examples
