"""`[training] num_epochs` (seed 001): passes over the data, reshuffled per epoch, and the step count.

With num_epochs = E > 0 the training examples are laid out as E permutations one after another, epoch
e shuffled by `random.Random("epoch:<seed>:<e>")` (the run's seed, 0 when unset), and the run's steps
are the smaller of `max_steps` and what the epochs give, max(1, E * examples // batch_size) (a batch
never runs past the last epoch). The RunLoop's data cursor reads the laid-out order, so a resumed run
continues in the same epoch at the same place. With num_epochs = 0 (the default) the data is read in
order, round-robin, as the original's trainer does.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from retrain_ray.config.sections_runtime import DataSection
    from retrain_ray.config.sections_training import TrainingSection
    from retrain_ray.data.types import TaskData

T = TypeVar("T")


def epoch_order(examples: Sequence[T], num_epochs: int, seed: int) -> list[T]:
    """`num_epochs` shuffled passes over `examples`, one after another."""
    order: list[T] = []
    for epoch in range(num_epochs):
        one = list(examples)
        random.Random(f"epoch:{seed}:{epoch}").shuffle(one)
        order.extend(one)
    return order


@dataclass(frozen=True)
class StepPlan:
    """The run's step count and which key set it."""

    steps: int
    limited_by: str  # "max_steps" or "num_epochs"
    explanation: str


def plan_steps(max_steps: int, num_epochs: int, num_examples: int, batch_size: int) -> StepPlan:
    if num_epochs <= 0:
        return StepPlan(max_steps, "max_steps", f"max_steps = {max_steps} (num_epochs not set)")
    from_epochs = max(1, num_epochs * num_examples // batch_size)
    epochs = f"num_epochs = {num_epochs} x {num_examples} examples / batch_size {batch_size} = {from_epochs} steps"
    if from_epochs < max_steps:
        return StepPlan(from_epochs, "num_epochs", f"{epochs} (fewer than max_steps = {max_steps})")
    return StepPlan(max_steps, "max_steps", f"max_steps = {max_steps} (no more than {epochs})")


def apply_epochs(t: TrainingSection, task: TaskData) -> tuple[TaskData, StepPlan]:
    """The task in epoch order, for `num_epochs` > 0, and the run's step count (`plan.steps`: the run's
    `max_steps` from then on)."""
    plan = plan_steps(t.max_steps, t.num_epochs, len(task.train), t.batch_size)
    if t.num_epochs <= 0:
        return task, plan
    return dataclasses.replace(task, train=epoch_order(task.train, t.num_epochs, max(t.seed, 0))), plan


def plan_from_config(t: TrainingSection, data: DataSection) -> StepPlan | None:
    """The step plan where the examples can be counted without loading them (the built-in tasks, or
    no num_epochs); None: counted when the run loads its data."""
    if t.num_epochs <= 0:
        return plan_steps(t.max_steps, 0, 0, t.batch_size)
    if data.source != "builtin":
        return None
    examples = min(data.num_examples, t.max_examples) if t.max_examples > 0 else data.num_examples
    return plan_steps(t.max_steps, t.num_epochs, examples, t.batch_size)
