"""The shared trainer's contract: what a member run sends for one step or one sampling call. Frozen and
picklable, so a trainer actor can receive it."""

from __future__ import annotations

from dataclasses import dataclass

from retrain_ray.backends.types import TrainBatch
from retrain_ray.engines.types import SamplingParams


@dataclass(frozen=True)
class StepRequest:
    """One member run's `train_step(batch, lr=..., weight_decay=...)`, as its solo backend takes it: the lr
    is the run's own schedule's value at its step (run/loop.py `LRSchedule`)."""

    batch: TrainBatch
    lr: float
    weight_decay: float = 0.0


@dataclass(frozen=True)
class SampleRequest:
    """One member run's `generate(prompt_ids_P, num_samples, params)`, as its PyTorch engine takes it, and
    the seed of its sampling generator (sampling.py: made from the seed on the first call, then kept)."""

    prompt_ids_P: list[list[int]]
    num_samples: int
    params: SamplingParams
    seed: int
