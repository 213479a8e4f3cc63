"""Contract of the back-pressure subsystem: what a run reports after a step, what it gets back.

A run sends one `StepObservation` per step (trained or skipped) and receives a `Decision`. Both are
frozen dataclasses of plain values, so they pickle cheaply and can be sent to and from Ray actors.
`BackPressureAdvisor` is the Protocol the RunLoop talks to; implementations: `NoOpAdvisor` (back
pressure off), `LocalAdvisor` (an in-process USL controller, the original's design) and
`RemoteAdvisor` (the campaign's back-pressure actor, which adds the pooled fit per shared resource).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

Action = Literal["hold", "throttle", "increase"]
Regime = Literal["warmup", "retrograde", "memory_bound", "compute_bound", "optimal"]

ACTIONS: tuple[str, ...] = ("hold", "throttle", "increase")
REGIMES: tuple[str, ...] = ("warmup", "retrograde", "memory_bound", "compute_bound", "optimal")


@dataclass(frozen=True)
class StepObservation:
    """One step of one run, as seen by back pressure. Frozen and picklable.

    `batch_size * group_size` is the run's concurrency p. `total_tokens` counts datum tokens only
    (prompt + completion of non-skipped groups), as the original. `sample_time_s` is the time the
    step's request spent at the shared endpoint (after any throttle wait); the pooled fit uses it to
    estimate in-flight concurrency. `resource` names the shared endpoint ("" = none) and
    `endpoint_errors` counts errors/timeouts the endpoint returned during the step.
    """

    run_id: str
    step: int
    batch_size: int
    group_size: int
    total_tokens: int
    step_time_s: float
    sample_time_s: float = 0.0
    train_time_s: float = 0.0
    skipped: bool = False
    resource: str = ""
    endpoint_errors: int = 0


@dataclass(frozen=True)
class Decision:
    """What back pressure recommends after a step. Frozen and picklable.

    `pooled_p_star` and `capacity` are set only by the pooled fit (campaign actor, shared resource).
    `warmup` is the trainer's sweep flag (spec 1.4: enabled and step < warmup_steps), set by
    `apply_trainer_rules`; it is the original's `bp_warmup` metric.
    """

    action: str
    regime: str
    p_star: float
    sigma: float
    kappa: float
    lam: float
    utilization: float
    throughput: float
    recommended_batch_size: int
    recommended_group_size: int
    pooled_p_star: float | None = None
    capacity: int | None = None
    warmup: bool = False
    roofline: dict[str, float] | None = None  # bp_intensity, bp_ridge, bp_achieved_*: backpressure/usl.py

    def to_metrics(self) -> dict[str, Any]:
        """The original's `bp_*` metric names (spec 8), plus `bp_lambda` and the pooled keys."""
        row: dict[str, Any] = {
            "bp_warmup": bool(self.warmup),
            "bp_action": self.action,
            "bp_regime": self.regime,
            "bp_p_star": float(self.p_star),
            "bp_sigma": float(self.sigma),
            "bp_kappa": float(self.kappa),
            "bp_lambda": float(self.lam),
            "bp_utilization": float(self.utilization),
            "bp_throughput": float(self.throughput),
        }
        if self.pooled_p_star is not None:
            row["bp_pooled_p_star"] = float(self.pooled_p_star)
        if self.capacity is not None:
            row["bp_capacity"] = int(self.capacity)
        if self.roofline is not None:
            row.update(self.roofline)
        return row


def default_decision(batch_size: int = 1, group_size: int = 1) -> Decision:
    """The original's NoOp decision (spec 4.3): hold, warmup, p*=1, sigma=kappa=0, util=0, X=0."""
    return Decision(
        action="hold",
        regime="warmup",
        p_star=1.0,
        sigma=0.0,
        kappa=0.0,
        lam=0.0,
        utilization=0.0,
        throughput=0.0,
        recommended_batch_size=int(batch_size),
        recommended_group_size=int(group_size),
    )


@runtime_checkable
class BackPressureAdvisor(Protocol):
    """What the RunLoop calls once per step. `advise` returns the batch size to use next."""

    def advise(self, obs: StepObservation) -> Decision: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, d: dict[str, Any]) -> None: ...


class NoOpAdvisor:
    """Back pressure off: always the default decision, keeping the run's batch and group size."""

    def advise(self, obs: StepObservation) -> Decision:
        return default_decision(obs.batch_size, obs.group_size)

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, d: dict[str, Any]) -> None:
        return None
