"""Coalescing members' concurrent `train_step` calls into one batched step (a plain class; the trainer
actor of the campaign wiring would host it and call it from its threads).

Each member calls `train_step(run_id, request)` from its own thread and blocks until its update is done.
A call's request waits in `pending` until every member of the trainer has one there, or until `window_s`
has passed since it arrived; the caller that finds either true takes all pending requests and runs one
`SharedTrainer.train_step` over them (one step at a time; requests arriving meanwhile wait for the next).
Each caller gets its own `TrainStepResult`, or its own error raised (a non-finite gradient, or what broke
the whole step). A member that joins or leaves wakes the waiters, so a batch waiting on a member that has
left goes at once.
"""

from __future__ import annotations

import threading
import time

from retrain_ray.backends.local.policy import PolicySettings
from retrain_ray.backends.types import TrainStepResult
from retrain_ray.shared_trainer.trainer import SharedTrainer
from retrain_ray.shared_trainer.types import StepRequest


class CoalescingTrainer:
    """Thread-safe front of a `SharedTrainer`: members' concurrent steps go in one batched step."""

    def __init__(self, trainer: SharedTrainer, *, window_s: float = 0.05) -> None:
        self.trainer = trainer
        self.window_s = window_s
        self._cond = threading.Condition()
        self._pending: dict[str, StepRequest] = {}
        self._arrived: dict[str, float] = {}
        self._results: dict[str, TrainStepResult | BaseException] = {}
        self._running = False
        self.batch_sizes: list[int] = []
        """How many members each batched step updated, in order (what the pooled back pressure reads)."""

    def add_run(self, run_id: str, settings: PolicySettings) -> None:
        with self._cond:
            self.trainer.add_run(run_id, settings)
            self._cond.notify_all()

    def remove_run(self, run_id: str) -> None:
        with self._cond:
            self.trainer.remove_run(run_id)
            self._pending.pop(run_id, None)
            self._cond.notify_all()

    def train_step(self, run_id: str, request: StepRequest, *, timeout_s: float = 600.0) -> TrainStepResult:
        """The member's update, done in the next batched step; raises its own error."""
        give_up = time.monotonic() + timeout_s
        with self._cond:
            self._pending[run_id] = request
            self._arrived[run_id] = time.monotonic()
            self._cond.notify_all()
            batch = self._wait_for_turn(run_id, give_up)
        if batch is not None:
            self._run(batch)
        with self._cond:
            while run_id not in self._results:
                if not self._cond.wait(timeout=max(give_up - time.monotonic(), 0.0)):
                    raise TimeoutError(f"run {run_id!r}: no batched step finished in {timeout_s} s")
            outcome = self._results.pop(run_id)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def _ready(self, run_id: str) -> bool:
        if self._running or run_id not in self._pending:
            return False
        everyone = set(self.trainer.members) <= set(self._pending)
        return everyone or time.monotonic() - min(self._arrived[r] for r in self._pending) >= self.window_s

    def _wait_for_turn(self, run_id: str, give_up: float) -> dict[str, StepRequest] | None:
        """The pending batch when this caller is to run it; None when another caller ran this one's request."""
        while run_id not in self._results:
            if self._ready(run_id):
                batch, self._pending = self._pending, {}
                self._running = True
                return batch
            remaining = give_up - time.monotonic()
            if remaining <= 0:
                self._pending.pop(run_id, None)
                raise TimeoutError(f"run {run_id!r}: its step was not taken in time")
            self._cond.wait(timeout=min(self.window_s, remaining))
        return None

    def _run(self, batch: dict[str, StepRequest]) -> None:
        outcomes: dict[str, TrainStepResult | BaseException] = {}
        try:
            out = self.trainer.train_step(batch)
            outcomes = {**out.results, **out.errors}
        except Exception as exc:  # the whole step broke: every caller in it gets the error
            outcomes = dict.fromkeys(batch, exc)
        with self._cond:
            self._results.update(outcomes)
            self.batch_sizes.append(len(batch))
            self._running = False
            self._cond.notify_all()
