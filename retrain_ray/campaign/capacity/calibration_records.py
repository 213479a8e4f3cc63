"""The calibration figures `explain --calibrate` reads from a pilot's logs (campaign/capacity/calibration.py):
plain frozen records of one phase, one run, one campaign and the whole pilot."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field


@dataclass(frozen=True)
class PhaseFigures:
    """Step times of one phase (warm start or RL) of one or more runs."""

    steps: int
    recent_step_times: tuple[float, ...]  # step_time_s of the later half of the phase's steps
    step_time_sum: float  # over the steps that follow another row (the span's steps)
    wall_span_sum: float  # wall_time differences to the previous row, over the same steps
    spans: int = 0  # how many such steps

    @property
    def median_step_time_s(self) -> float:
        return statistics.median(self.recent_step_times) if self.recent_step_times else 0.0

    @property
    def overhead(self) -> float:
        """Wall clock per second of `step_time_s` (>= 1): what happens between the timed steps."""
        if self.step_time_sum <= 0 or self.wall_span_sum <= 0:
            return 1.0
        return max(1.0, self.wall_span_sum / self.step_time_sum)

    @property
    def seconds_per_step(self) -> float:
        """Wall clock per step: the mean spacing of the rows (slow steps weigh what they cost; the median
        `step_time_s` alone ran 10-20% short of a loaded pilot's own wall time)."""
        return self.wall_span_sum / self.spans if self.spans else self.median_step_time_s


@dataclass(frozen=True)
class RunFigures:
    run_name: str
    condition: str
    seed: int | None
    steps: int
    warm_start: PhaseFigures | None
    rl: PhaseFigures | None
    warm_start_ended: bool  # RL steps followed the warm start (by its target or at its own cap: see the next two)
    max_token_hit_rate: float | None = None
    tokens_per_s: float | None = None
    bp_regimes: dict[str, int] = field(default_factory=dict)
    bp_actions: dict[str, int] = field(default_factory=dict)
    startup_s: float | None = None
    teardown_s: float | None = None
    checkpoint_bytes: int | None = None
    warm_start_capped: bool = False  # no target probe was logged: the warm start ran its own sft_warmup_steps
    warm_start_last_probe: float | None = None  # the last warm-start step's sft_probe_correct_rate

    @property
    def warm_start_steps(self) -> int:
        return self.warm_start.steps if self.warm_start else 0


@dataclass(frozen=True)
class CampaignFigures:
    name: str
    path: str
    runs: int
    max_concurrent: int
    startup_s: float | None = None
    teardown_s: float | None = None
    handover_s: float | None = None
    wall_time_s: float | None = None


@dataclass(frozen=True)
class Calibration:
    source: str
    runs: tuple[RunFigures, ...]
    campaigns: tuple[CampaignFigures, ...] = ()

    def for_condition(self, condition: str) -> tuple[RunFigures, ...]:
        return tuple(r for r in self.runs if r.condition == condition)
