"""The campaign's wall-time estimate: pure arithmetic over the plan's shape and calibration figures.

No files, no Ray: `retrain-ray explain` gathers the inputs (the plan, a pilot's figures from
campaign/capacity/calibration.py, the GPUs available) and this module adds them up.

    slots      = min(concurrent_runs(parallel, max_workers, runs), GPUs available // GPUs per run)
    run time   = run start-up + warm-start steps x warm-start s/step + RL steps x RL s/step + run teardown
    schedule   = runs in plan order, each into the slot that frees first; a run's work starts no sooner
                 than `stagger_seconds` after the previous run's, and a freed slot takes `handover_s`
                 before the next run starts in it (Tune's scheduling)
    wall time  = campaign start-up + the schedule's makespan + campaign teardown

Seconds per step are the wall clock per step (the pilot's mean row spacing: the step and what happens
between steps, logging, checkpoints, the warm start's probe), so a run's steps add up to what its
log's timestamps span.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TypedDict


@dataclass(frozen=True)
class RunWork:
    """One run of the plan: its steps per phase and the seconds each step takes."""

    run_name: str
    warm_start_steps: int
    rl_steps: int
    warm_start_step_s: float
    rl_step_s: float

    @property
    def step_seconds(self) -> float:
        return self.warm_start_steps * self.warm_start_step_s + self.rl_steps * self.rl_step_s


@dataclass(frozen=True)
class Overheads:
    """Seconds outside the steps: the campaign's own (driver, Ray) and each run's (model load, final save)."""

    campaign_startup_s: float = 0.0
    campaign_teardown_s: float = 0.0
    run_startup_s: float = 0.0
    run_teardown_s: float = 0.0
    handover_s: float = 0.0


@dataclass(frozen=True)
class Slots:
    """How many runs go at once, and what limits it."""

    count: int
    limited_by: str  # "max_workers" (the plan's concurrency) or "gpus"


@dataclass(frozen=True)
class CheckpointUse:
    """Disk the run checkpoints take at most: size x checkpoints kept x runs (seed 001)."""

    bytes_per_checkpoint: int
    kept_per_run: int
    runs: int

    @property
    def total_bytes(self) -> int:
        return self.bytes_per_checkpoint * self.kept_per_run * self.runs


class CheckpointDiskJson(TypedDict):
    bytes_per_checkpoint: int
    kept_per_run: int
    runs: int
    total_bytes: int


class _EstimateJsonRequired(TypedDict):
    estimated_wall_time_s: float
    campaign_startup_s: float
    schedule_s: float
    campaign_teardown_s: float
    slots: int
    slots_limited_by: str
    warm_start_step_seconds: float
    rl_step_seconds: float
    stagger_wait_s: float
    run_seconds: dict[str, float]


class EstimateJson(_EstimateJsonRequired, total=False):
    """`Estimate.to_dict`: the JSON `retrain-ray explain` prints as the capacity's "parts"."""

    checkpoint_disk: CheckpointDiskJson  # only where the runs save checkpoints of a known size


@dataclass(frozen=True)
class Estimate:
    """The estimate and its parts (seconds)."""

    wall_time_s: float
    campaign_startup_s: float
    schedule_s: float
    campaign_teardown_s: float
    slots: Slots
    run_seconds: dict[str, float] = field(default_factory=dict)
    warm_start_seconds: float = 0.0
    rl_seconds: float = 0.0
    stagger_wait_s: float = 0.0
    checkpoint: CheckpointUse | None = None

    def to_dict(self) -> EstimateJson:
        out: EstimateJson = {
            "estimated_wall_time_s": self.wall_time_s,
            "campaign_startup_s": self.campaign_startup_s,
            "schedule_s": self.schedule_s,
            "campaign_teardown_s": self.campaign_teardown_s,
            "slots": self.slots.count,
            "slots_limited_by": self.slots.limited_by,
            "warm_start_step_seconds": self.warm_start_seconds,
            "rl_step_seconds": self.rl_seconds,
            "stagger_wait_s": self.stagger_wait_s,
            "run_seconds": dict(self.run_seconds),
        }
        if self.checkpoint is not None:
            c = self.checkpoint
            out["checkpoint_disk"] = {"bytes_per_checkpoint": c.bytes_per_checkpoint, "kept_per_run": c.kept_per_run,
                                      "runs": c.runs, "total_bytes": c.total_bytes}
        return out


def slots(concurrency: int, gpus_per_run: float, gpus_available: float | None) -> Slots:
    """The plan's concurrency, bounded by the runs that fit on the GPUs available (None: not bounded)."""
    if gpus_per_run <= 0 or gpus_available is None:
        return Slots(max(1, concurrency), "max_workers")
    fit = int(gpus_available // gpus_per_run)
    if fit < concurrency:
        return Slots(max(1, fit), "gpus")
    return Slots(max(1, concurrency), "max_workers")


def kept_checkpoints(max_steps: int, save_every: int, keep_last: int) -> int:
    """Checkpoints one run keeps at its end: one per `save_every` steps, at most `keep_last` (0 = all)."""
    if save_every <= 0:
        return 0
    saved = max_steps // save_every
    return min(saved, keep_last) if keep_last > 0 else saved


def run_seconds(run: RunWork, overheads: Overheads) -> float:
    return overheads.run_startup_s + run.step_seconds + overheads.run_teardown_s


def schedule(durations: Sequence[float], slot_count: int, *, stagger_s: float, handover_s: float) -> tuple[float, float]:
    """(makespan, total stagger wait) of runs started in order into `slot_count` slots."""
    free = [0.0] * max(1, slot_count)  # when each slot can take its next run
    heapq.heapify(free)
    last_start: float | None = None
    end, waited = 0.0, 0.0
    for duration in durations:
        ready = heapq.heappop(free)
        start = ready if last_start is None else max(ready, last_start + stagger_s)
        waited += start - ready
        last_start = start
        finish = start + duration
        end = max(end, finish)
        heapq.heappush(free, finish + handover_s)
    return end, waited


def estimate(runs: Sequence[RunWork], *, slot_plan: Slots, stagger_s: float, overheads: Overheads,
             checkpoint: CheckpointUse | None = None) -> Estimate:
    """The campaign's wall time: start-up, the runs scheduled into the slots, teardown."""
    per_run = {r.run_name: run_seconds(r, overheads) for r in runs}
    makespan, waited = schedule(list(per_run.values()), slot_plan.count, stagger_s=stagger_s,
                                handover_s=overheads.handover_s)
    return Estimate(
        wall_time_s=overheads.campaign_startup_s + makespan + overheads.campaign_teardown_s,
        campaign_startup_s=overheads.campaign_startup_s,
        schedule_s=makespan,
        campaign_teardown_s=overheads.campaign_teardown_s,
        slots=slot_plan,
        run_seconds=per_run,
        warm_start_seconds=sum(r.warm_start_steps * r.warm_start_step_s for r in runs),
        rl_seconds=sum(r.rl_steps * r.rl_step_s for r in runs),
        stagger_wait_s=waited,
        checkpoint=checkpoint,
    )
