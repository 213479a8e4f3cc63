"""The MATH dataset (`[data] source = "math"`), as the original's `data/math.py`.

`datasets.load_dataset("EleutherAI/hendrycks_math", subject, split="train")` for five subjects in
a fixed order; each row becomes `Example(problem, extract_boxed(solution))`; `max_examples > 0`
truncates; no shuffling. Needs the optional `datasets` package and network access to the Hugging
Face hub; offline, or without `datasets`, it fails with a message pointing at local files.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import cast

from retrain_ray.data.types import Example
from retrain_ray.rewards.boxed import extract_boxed

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
