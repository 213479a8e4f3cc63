"""Contract of the data layer: examples, a task's splits, and a built-in task's generator.

`Example` and `TaskData` cross Ray actor boundaries, so they are frozen and picklable (the
`format_answer` of built-in and file tasks is the module-level `boxed`, which pickles by name).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from retrain_ray.rewards.boxed import boxed


@dataclass(frozen=True)
class Example:
    """One prompt and the reference answer its completions are scored against."""

    prompt: str
    reference: str


@dataclass(frozen=True)
class TaskData:
    """Train and eval examples, plus how a correct completion is written (for SFT warm-start targets)."""

    train: list[Example]
    eval: list[Example]
    format_answer: Callable[[str], str] = boxed


Generator = Callable[[random.Random, int], Example]
"""Draws one example of a given level from a seeded random source."""


@dataclass(frozen=True)
class TaskSpec:
    """A built-in verifiable task: a seeded generator per level and the expected answer format."""

    name: str
    generate: Generator
    levels: tuple[int, ...] = (1, 2, 3)
    format_answer: Callable[[str], str] = boxed
    description: str = ""
