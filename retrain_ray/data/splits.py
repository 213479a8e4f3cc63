"""Seeded, disjoint train/eval splits for built-in tasks (`load_task`)."""

from __future__ import annotations

import itertools
import random

from retrain_ray.data.builtin import TASKS
from retrain_ray.data.types import Example, TaskData, TaskSpec

DRAWS_PER_EXAMPLE = 20
"""Give up looking for new distinct prompts after this many draws per requested example."""


def get_task(name: str) -> TaskSpec:
    """Look up a built-in task by name, with the list of known names when it is unknown."""
    spec = TASKS.get(name)
    if spec is None:
        raise ValueError(f"unknown built-in task {name!r} ([data] task); choose one of {sorted(TASKS)}")
    return spec


def _distinct_examples(spec: TaskSpec, level: int, seed: int, wanted: int) -> list[Example]:
    rng = random.Random(f"{spec.name}:{level}:{seed}")
    seen: dict[str, Example] = {}
    for _ in range(wanted * DRAWS_PER_EXAMPLE):
        example = spec.generate(rng, level)
        seen.setdefault(example.prompt, example)
        if len(seen) >= wanted:
            break
    return list(seen.values())


def load_task(name: str, level: int = 1, seed: int = 0, num_train: int = 512, num_eval: int = 64) -> TaskData:
    """Generate a built-in task's train and eval splits; eval prompts never appear in train."""
    spec = get_task(name)
    if level not in spec.levels:
        raise ValueError(f"task {name!r} has levels {list(spec.levels)}; got [data] level = {level}")
    if num_train <= 0 or num_eval < 0:
        raise ValueError(f"task {name!r}: num_train must be > 0 and num_eval >= 0, got {num_train}, {num_eval}")
    pool = _distinct_examples(spec, level, seed, num_train + num_eval)
    if len(pool) <= num_eval:
        raise ValueError(
            f"task {name!r} level {level} has only {len(pool)} distinct prompts, too few for "
            f"{num_eval} eval examples plus training; lower num_eval or raise the level"
        )
    eval_examples, rest = pool[:num_eval], pool[num_eval:]
    train = list(itertools.islice(itertools.cycle(rest), num_train))
    return TaskData(train=train, eval=eval_examples, format_answer=spec.format_answer)
