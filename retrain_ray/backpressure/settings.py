"""Settings of the campaign's back-pressure actor: the [backpressure] section, frozen and picklable.

`from_config(cfg)` reads `RetrainConfig.backpressure`; the keyword defaults mirror the original's
(spec 4.3) so the pure classes work without the config package.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from retrain_ray.backpressure.pooled import PooledController
from retrain_ray.backpressure.roofline import ModelShapes
from retrain_ray.backpressure.usl import USLController, roofline_flops_per_token, roofline_shapes

if TYPE_CHECKING:
    from retrain_ray.config.schema import RetrainConfig


@dataclass(frozen=True)
class BackPressureSettings:
    """Per-run controller parameters plus the pooled fit's. Frozen and picklable (sent to the actor)."""

    enabled: bool = False
    warmup_steps: int = 10
    ema_decay: float = 0.9
    throttle_margin: float = 0.85
    increase_margin: float = 0.5
    min_batch_size: int = 1
    max_batch_size: int = 64
    peak_gflops: float = 0.0
    peak_bw_gb_s: float = 0.0
    pooled: bool = True
    error_cut: float = 0.5
    min_capacity: int = 1
    max_capacity: int = 64
    pooled_warmup_rounds: int = 16
    pooled_sweep_drop: float = 0.05
    pooled_probe_every: int = 16
    pooled_keep_rounds: int = 8
    flops_per_token: float = 0.0  # the roofline hint's, derived from the model (usl.roofline_flops_per_token)
    shapes: ModelShapes | None = None  # the model's, when both peaks turn the roofline on (usl.roofline_shapes)

    @classmethod
    def from_config(cls, cfg: RetrainConfig, **overrides: Any) -> BackPressureSettings:
        bp = cfg.backpressure
        names = {f.name for f in dataclasses.fields(cls)}
        values = {n: getattr(bp, n) for n in names if hasattr(bp, n)}
        values["flops_per_token"] = roofline_flops_per_token(cfg)
        values["shapes"] = roofline_shapes(cfg)
        values.update(overrides)
        return cls(**values)

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
