"""The learning rate of each step: warmup, then a constant, linear or cosine schedule.

    warmup (step < W):  lr = base * (step + 1) / W             (the first step already trains)
    after warmup:       progress = (step - W) / (T - W)          (0 at the first step after warmup)
        constant        lr = base
        linear          lr = base * (1 - progress)
        cosine          lr = base * (1 + cos(pi * progress)) / 2

T is the run's step count and W its warmup steps (`warmup_steps`, or round(warmup_ratio * T)). Both
decays reach 0 one step after the last one, so the last step still trains. Pure: the RunLoop asks for
each step's rate and the row's `lr` column logs it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from retrain_ray.config.sections_training import TrainingSection


@dataclass(frozen=True)
class LRSchedule:
    base_lr: float
    total_steps: int
    warmup_steps: int = 0
    kind: str = "constant"

    @classmethod
    def from_training(cls, training: TrainingSection) -> LRSchedule:
        """From `[training]`: lr, max_steps (the run's step count), warmup_steps / warmup_ratio, lr_schedule."""
        total = int(training.max_steps)
        warmup = int(training.warmup_steps) or round(float(training.warmup_ratio) * total)
        return cls(float(training.lr), total, min(warmup, total), str(training.lr_schedule))

    def lr_at(self, step: int) -> float:
        return lr_at(step, base_lr=self.base_lr, total_steps=self.total_steps, warmup_steps=self.warmup_steps,
                     kind=self.kind)


def lr_at(step: int, *, base_lr: float, total_steps: int, warmup_steps: int = 0, kind: str = "constant") -> float:
    """The learning rate of 0-based `step` (see the module docstring)."""
    if step < warmup_steps:
        return base_lr * (step + 1) / warmup_steps
    if kind == "constant":
        return base_lr
    progress = (step - warmup_steps) / max(total_steps - warmup_steps, 1)
    if kind == "linear":
        return base_lr * (1.0 - progress)
    if kind == "cosine":
        return base_lr * (1.0 + math.cos(math.pi * progress)) / 2.0
    raise ValueError(f"unknown lr_schedule {kind!r}; use constant, linear or cosine")
