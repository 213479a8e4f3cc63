"""Coalescing members' concurrent `train_step` and `generate` calls into batched steps and batched decodes
(a plain class; the trainer actor of the campaign wiring hosts it and calls it from its threads).

Each member calls `train_step(run_id, request)` or `generate(run_id, ...)` from its own thread and blocks
until it is done. A call's request waits in its kind's `pending` until every member of the trainer has one
there, or until `window_s` has passed since the first of them arrived; the caller that finds either true
takes all pending requests of that kind and runs one `SharedTrainer.train_step` or `SharedTrainer.generate`
over them. One batch runs at a time, of either kind (they share the model and its routing); requests
arriving meanwhile wait for the next. Each caller gets its own result, or its own error raised (a
non-finite gradient, a malformed sampling request, or what broke the whole batch). A member that joins or
leaves wakes the waiters, so a batch waiting on a member that has left goes at once.

Capacity (the pooled back pressure's, `resize`): a batched step takes at most `capacity` members, the
earliest arrived first; it closes as soon as that many are pending (or everyone, or the window has passed).
The others stay pending, in arrival order, for the next batch, which goes as soon as this one is done (their
window has passed). A capacity below 1 is clamped to 1; `None` (the default) puts no limit. Sampling calls are
not limited: the capacity steers the batched step only. Each member's step result carries `wait_s`, the
time its request waited for its batch to start: the run's back pressure counts only the rest as time at the
trainer (as a throttle's grant wait is not time at its endpoint).

Every batch runs on one worker thread of the coalescer's own, whichever caller takes it: glibc keeps a malloc
arena per thread, and batches run on the callers' own threads (a Ray actor's pool of up to 2 x members + 2)
each left an arena of freed activations behind. Measured on a 10-run campaign of the 1.3M-parameter built-in
model, 8 members at once: the trainer actor grew to 10 GB RSS; on one thread it stays at 1.3-1.5 GB
(docs/shared_trainer.md).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from retrain_ray.backends.local.policy import PolicySettings
from retrain_ray.backends.types import TrainStepResult
from retrain_ray.engines.types import SampleResult, SamplingParams
from retrain_ray.shared_trainer.sampling import check_requests
from retrain_ray.shared_trainer.trainer import SharedTrainer, SharedTrainerError
from retrain_ray.shared_trainer.types import SampleRequest, StepRequest

Request = TypeVar("Request")
Outcome = TypeVar("Outcome")
Samples = list[list[SampleResult]]


@dataclass
class _Queue(Generic[Request, Outcome]):
    """One kind of call's pending requests, their arrival times and the finished outcomes to hand back."""

    run: Callable[[dict[str, Request]], Mapping[str, Outcome | BaseException]]
    pending: dict[str, Request] = field(default_factory=lambda: {})
    arrived: dict[str, float] = field(default_factory=lambda: {})
    results: dict[str, Outcome | BaseException] = field(default_factory=lambda: {})
    sizes: list[int] = field(default_factory=lambda: list[int]())
    capacity: int | None = None
    """The most requests one batch takes (None: all pending)."""
    waits: dict[str, float] = field(default_factory=lambda: {})
    """How long each request of the running batch waited for it to start."""

    def next_batch(self) -> list[str]:
        """The runs the next batch takes: the earliest arrived, up to the capacity."""
        earliest = sorted(self.pending, key=lambda r: self.arrived[r])
        return earliest if self.capacity is None else earliest[: self.capacity]


class CoalescingTrainer:
    """Thread-safe front of a `SharedTrainer`: members' concurrent steps go in one batched step, their
    concurrent sampling calls in one batched decode."""

    def __init__(self, trainer: SharedTrainer, *, window_s: float = 0.05, capacity: int | None = None) -> None:
        self.trainer = trainer
        self.window_s = window_s
        self._cond = threading.Condition()
        self._running = False
        self._train: _Queue[StepRequest, TrainStepResult] = _Queue(self._train_batch)
        self._sample: _Queue[SampleRequest, Samples] = _Queue(self._sample_batch)
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="shared-trainer-batch")
        self.resizes: list[int] = []
        """Every capacity `resize` set, in order (what the trainer's figures report)."""
        if capacity is not None:
            self.resize(capacity)

    @property
    def capacity(self) -> int | None:
        """The most members one batched step takes now (None: no limit)."""
        return self._train.capacity

    def resize(self, capacity: int) -> int:
        """Sets the most members one batched step takes (below 1: 1); returns it. A batch already running is
        not changed; waiting members that now fill a batch go at once."""
        clamped = max(1, int(capacity))
        with self._cond:
            self._train.capacity = clamped
            self.resizes.append(clamped)
            self._cond.notify_all()
        return clamped

    @property
    def batch_sizes(self) -> list[int]:
        """How many members each batched step updated, in order (what the pooled back pressure reads)."""
        return self._train.sizes

    @property
    def decode_sizes(self) -> list[int]:
        """How many members each batched decode sampled for, in order."""
        return self._sample.sizes

    def add_run(self, run_id: str, settings: PolicySettings) -> None:
        with self._cond:
            self.trainer.add_run(run_id, settings)
            self._cond.notify_all()

    def remove_run(self, run_id: str) -> None:
        with self._cond:
            self.trainer.remove_run(run_id)
            self._train.pending.pop(run_id, None)
            self._sample.pending.pop(run_id, None)
            self._cond.notify_all()

    def train_step(self, run_id: str, request: StepRequest, *, timeout_s: float = 600.0) -> TrainStepResult:
        """The member's update, done in the next batched step; raises its own error."""
        return self._call(self._train, run_id, request, timeout_s)

    def generate(self, run_id: str, prompt_ids_P: list[list[int]], num_samples: int, params: SamplingParams,
                 *, seed: int, timeout_s: float = 600.0) -> Samples:
        """The member's `results[P][num_samples]` (the PyTorch engine's `generate`), sampled in the next
        batched decode under its adapter from its own generator (`seed`: sampling.py); raises its own error."""
        request = SampleRequest(prompt_ids_P, num_samples, params, seed)
        check_requests({run_id: request})  # a malformed request fails its caller alone, before it waits
        return self._call(self._sample, run_id, request, timeout_s)

    def _call(self, queue: _Queue[Request, Outcome], run_id: str, request: Request, timeout_s: float) -> Outcome:
        give_up = time.monotonic() + timeout_s
        with self._cond:
            queue.pending[run_id] = request
            queue.arrived[run_id] = time.monotonic()
            self._cond.notify_all()
            batch = self._wait_for_turn(queue, run_id, give_up)
        if batch is not None:
            self._run(queue, batch)
        with self._cond:
            while run_id not in queue.results:
                if not self._cond.wait(timeout=max(give_up - time.monotonic(), 0.0)):
                    raise TimeoutError(f"run {run_id!r}: no batch finished in {timeout_s} s")
            outcome = queue.results.pop(run_id)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def _ready(self, queue: _Queue[Request, Outcome], run_id: str) -> bool:
        """Whether `run_id` runs the next batch now: nothing runs, its request is among those the batch takes
        (so the caller that runs a batch is always in it), and the batch is full, complete or out of time."""
        if self._running or run_id not in queue.next_batch():
            return False
        full = queue.capacity is not None and len(queue.pending) >= queue.capacity
        everyone = set(self.trainer.members) <= set(queue.pending)
        return full or everyone or time.monotonic() - min(queue.arrived[r] for r in queue.pending) >= self.window_s

    def _wait_for_turn(self, queue: _Queue[Request, Outcome], run_id: str, give_up: float
                       ) -> dict[str, Request] | None:
        """The pending batch when this caller is to run it; None when another caller ran this one's request."""
        while run_id not in queue.results:
            if self._ready(queue, run_id):
                batch = {r: queue.pending.pop(r) for r in queue.next_batch()}
                now = time.monotonic()
                queue.waits = {r: now - queue.arrived.pop(r, now) for r in batch}
                self._running = True
                return batch
            remaining = give_up - time.monotonic()
            if remaining <= 0:
                queue.pending.pop(run_id, None)
                raise TimeoutError(f"run {run_id!r}: its request was not taken in time")
            self._cond.wait(timeout=min(self.window_s, remaining))
        return None

    def _run(self, queue: _Queue[Request, Outcome], batch: dict[str, Request]) -> None:
        outcomes: Mapping[str, Outcome | BaseException] = {}
        try:
            outcomes = self._worker.submit(queue.run, batch).result()
        except Exception as exc:  # the whole batch broke: every caller in it gets the error
            outcomes = dict.fromkeys(batch, exc)
        with self._cond:
            queue.results.update(outcomes)
            queue.sizes.append(len(batch))
            self._running = False
            self._cond.notify_all()

    def _train_batch(self, batch: dict[str, StepRequest]) -> dict[str, TrainStepResult | BaseException]:
        out = self.trainer.train_step(batch)
        waits = self._train.waits  # one batch runs at a time: these are this batch's
        results = {r: TrainStepResult(result.loss, result.metrics, wait_s=waits.get(r, 0.0))
                   for r, result in out.results.items()}
        return {**results, **out.errors}

    def _sample_batch(self, batch: dict[str, SampleRequest]) -> dict[str, Samples | BaseException]:
        members = set(self.trainer.members)
        outcomes: dict[str, Samples | BaseException] = {
            r: SharedTrainerError(f"run {r!r} is not a member of this shared trainer; add it with add_run first")
            for r in batch if r not in members}
        present = {r: request for r, request in batch.items() if r in members}
        if present:
            outcomes.update(self.trainer.generate(present))
        return outcomes
