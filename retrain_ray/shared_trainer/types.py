"""The shared trainer's contract: what a member run sends for one step. Frozen and picklable, so a trainer
actor can receive it."""

from __future__ import annotations

from dataclasses import dataclass

from retrain_ray.backends.types import TrainBatch


@dataclass(frozen=True)
class StepRequest:
    """One member run's `train_step(batch, lr=..., weight_decay=...)`, as its solo backend takes it: the lr
    is the run's own schedule's value at its step (run/loop.py `LRSchedule`)."""

    batch: TrainBatch
    lr: float
    weight_decay: float = 0.0
