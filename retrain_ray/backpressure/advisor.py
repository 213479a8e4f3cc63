"""How a run applies back-pressure decisions: the original trainer's rules (spec 1.4), in one place.

- While `step < warmup_steps` the batch size follows the warmup sweep `warmup_batch_sizes(min, max)`
  cyclically: [max(1, min), 2·min, 4·min, ... <= max] with max appended when it is not already last.
  With the defaults and warmup 10: 1, 2, 4, 8, 16, 32, 64, 1, 2, 4.
- After warmup only "throttle" and "increase" change the batch size, clamped to [min, max]; "hold"
  keeps the current one (so after warmup the last sweep value is kept until the fit says otherwise).
- A skipped step (no nonzero advantage) is observed but its decision is not applied.
- With back pressure disabled the decision is still computed (and logged) but never applied.

`LocalAdvisor` hosts a `USLController` in the run's process (the original's design); `RemoteAdvisor`
(retrain_ray/actors/backpressure.py) gets the same decision from the campaign actor and applies the
same rules through `apply_trainer_rules`. The returned Decision's `recommended_batch_size` is the batch
size the run should use for its *next* step; `action` stays the controller's (it is what is logged).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from retrain_ray.backpressure.types import Decision, StepObservation
from retrain_ray.backpressure.usl import USLController

if TYPE_CHECKING:
    from retrain_ray.config.sections_runtime import BackpressureSection
    from retrain_ray.config.sections_training import BackendSection, ModelSection


def warmup_batch_sizes(min_bs: int, max_bs: int) -> list[int]:
    """The trainer's warmup sweep: powers of two from max(1, min_bs) up to max_bs, then max_bs."""
    if max_bs < max(1, min_bs):
        raise ValueError(f"backpressure.max_batch_size ({max_bs}) must be >= min_batch_size ({min_bs})")
    sweep = []
    bs = max(1, int(min_bs))
    while bs <= max_bs:
        sweep.append(bs)
        bs *= 2
    if sweep[-1] != max_bs:
        sweep.append(int(max_bs))
    return sweep


def apply_trainer_rules(d: Decision, obs: StepObservation, *, enabled: bool, warmup_steps: int,
                        min_bs: int, max_bs: int) -> Decision:
    """Turn a controller decision into the batch size for step `obs.step + 1` (spec 1.4)."""
    next_bs = int(obs.batch_size)
    in_warmup = obs.step < warmup_steps
    if enabled and not in_warmup and not obs.skipped and d.action in ("throttle", "increase"):
        next_bs = max(min_bs, min(max_bs, int(d.recommended_batch_size)))
    if enabled and obs.step + 1 < warmup_steps:
        sweep = warmup_batch_sizes(min_bs, max_bs)
        next_bs = sweep[(obs.step + 1) % len(sweep)]
    return dataclasses.replace(d, recommended_batch_size=next_bs, warmup=enabled and in_warmup)


def initial_batch_size(batch_size: int, *, enabled: bool, warmup_steps: int, min_bs: int,
                       max_bs: int, start_step: int = 0) -> int:
    """Batch size of the first step a run executes (the sweep's entry during warmup)."""
    if enabled and start_step < warmup_steps:
        sweep = warmup_batch_sizes(min_bs, max_bs)
        return sweep[start_step % len(sweep)]
    return int(batch_size)


class LocalAdvisor:
    """BackPressureAdvisor over an in-process USLController (per-run control only)."""

    def __init__(self, controller: USLController, enabled: bool, min_bs: int, max_bs: int) -> None:
        self.controller = controller
        self.enabled = bool(enabled)
        self.min_bs, self.max_bs = int(min_bs), int(max_bs)

    @classmethod
    def from_config(cls, bp: BackpressureSection, model: ModelSection, backend: BackendSection) -> LocalAdvisor:
        return cls(USLController.from_config(bp, model, backend), bp.enabled, bp.min_batch_size, bp.max_batch_size)

    def initial_batch_size(self, batch_size: int, start_step: int = 0) -> int:
        return initial_batch_size(batch_size, enabled=self.enabled, start_step=start_step,
                                  warmup_steps=self.controller.warmup_steps,
                                  min_bs=self.min_bs, max_bs=self.max_bs)

    def advise(self, obs: StepObservation) -> Decision:
        self.controller.observe(obs.step_time_s, obs.batch_size, obs.group_size, obs.total_tokens,
                                skipped=obs.skipped)
        return apply_trainer_rules(self.controller.recommend(), obs, enabled=self.enabled,
                                   warmup_steps=self.controller.warmup_steps,
                                   min_bs=self.min_bs, max_bs=self.max_bs)

    def state_dict(self) -> dict[str, Any]:
        return {"controller": self.controller.state_dict()}

    def load_state_dict(self, d: dict[str, Any]) -> None:
        self.controller.load_state_dict(d["controller"])
