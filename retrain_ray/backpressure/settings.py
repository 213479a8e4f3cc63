"""Settings of the campaign's back-pressure actor: the [backpressure] section, frozen and picklable.

`from_config(backpressure, model, backend)` reads the `[backpressure]` section (and the model's figures). The section's keys take their defaults from the
section itself (`BackpressureSection`, config/sections_runtime.py: the original's, spec 4.3), so the two
cannot drift; the pooled fit's tuning and the roofline's model figures are ours and live only here.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

from retrain_ray.backpressure.pooled import PooledController
from retrain_ray.backpressure.usl import ModelShapes, USLController, roofline_flops_per_token, roofline_shapes
from retrain_ray.config.sections_runtime import BackpressureSection

if TYPE_CHECKING:
    from retrain_ray.config.sections_training import BackendSection, ModelSection

_SECTION = BackpressureSection()
"""The [backpressure] defaults: the one place they are written."""


@dataclass(frozen=True)
class BackPressureSettings:
    """Per-run controller parameters plus the pooled fit's. Frozen and picklable (sent to the actor)."""

    # the [backpressure] section's keys (`from_config` copies every one)
    enabled: bool = _SECTION.enabled
    warmup_steps: int = _SECTION.warmup_steps
    ema_decay: float = _SECTION.ema_decay
    throttle_margin: float = _SECTION.throttle_margin
    increase_margin: float = _SECTION.increase_margin
    min_batch_size: int = _SECTION.min_batch_size
    max_batch_size: int = _SECTION.max_batch_size
    peak_gflops: float = _SECTION.peak_gflops
    peak_bw_gb_s: float = _SECTION.peak_bw_gb_s
    pooled: bool = _SECTION.pooled
    error_cut: float = _SECTION.error_cut
    # not in the section: the pooled fit's tuning (tests set them)
    min_capacity: int = 1
    max_capacity: int = 64
    pooled_warmup_rounds: int = 16
    pooled_sweep_drop: float = 0.05
    pooled_probe_every: int = 16
    pooled_keep_rounds: int = 8
    flops_per_token: float = 0.0  # the roofline hint's, derived from the model (usl.roofline_flops_per_token)
    shapes: ModelShapes | None = None  # the model's, when both peaks turn the roofline on (usl.roofline_shapes)

    @classmethod
    def from_config(cls, backpressure: BackpressureSection, model: ModelSection, backend: BackendSection,
                    **overrides: int | float | bool) -> BackPressureSettings:
        """The section's keys, the model's roofline figures, then `overrides`."""
        section = cls(**backpressure.model_dump(), flops_per_token=roofline_flops_per_token(backpressure, model),
                      shapes=roofline_shapes(backpressure, model, backend))
        return dataclasses.replace(section, **overrides)

    def controller(self) -> USLController:
        return USLController(
            warmup_steps=self.warmup_steps, ema_decay=self.ema_decay,
            throttle_margin=self.throttle_margin, increase_margin=self.increase_margin,
            min_batch_size=self.min_batch_size, max_batch_size=self.max_batch_size,
            peak_gflops=self.peak_gflops, peak_bw_gb_s=self.peak_bw_gb_s, flops_per_token=self.flops_per_token,
            shapes=self.shapes,
        )

    def pooled_controller(self, resource: str) -> PooledController:
        return PooledController(
            resource, throttle_margin=self.throttle_margin, min_capacity=self.min_capacity,
            max_capacity=self.max_capacity, error_cut=self.error_cut,
            warmup_rounds=self.pooled_warmup_rounds, sweep_drop=self.pooled_sweep_drop,
            probe_every=self.pooled_probe_every, keep_rounds=self.pooled_keep_rounds,
        )
