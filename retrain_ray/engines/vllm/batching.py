"""Coalescing concurrent `generate` calls of several runs into one vLLM `LLM.generate` (a shared engine).

The offline `LLM` drives its own engine loop: one `LLM.generate` at a time. To serve several runs in
the same engine steps, callers queue their requests here and one of them, the *leader*, runs them all
in one `LLM.generate` with a SamplingParams and a LoRARequest per prompt. The leader first waits for
more callers: until `target()` runs have a request queued, or `window_s` has passed since it began
collecting. Requests that arrive while a batch runs are queued for the next one, which starts as soon
as the running batch ends (they have waited already). Each caller gets back its own slice and the
figures the run records: how many runs shared its batch, how long it waited for the engine.

`mode = "serial"` keeps one request per `LLM.generate` (the engine serves one run at a time), for
comparison and as a fallback.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

# the shared vLLM engine actor's gauges (actors/shared_vllm.py), retrain_engine_<name>, tagged campaign:
# requests in the running batch, requests queued for the next, adapter versions loaded, tokens/s of the
# latest batch
ENGINE_GAUGES = ("running", "waiting", "adapters_loaded", "tokens_per_s")
ENGINE_GAUGE_PREFIX = "retrain_engine_"

BATCHING_MODES = ("batch", "serial")

Req = TypeVar("Req")
Out = TypeVar("Out")


@dataclass
class Job(Generic[Req, Out]):
    """One caller's request, and what comes back to it once its batch has run."""

    run: str
    request: Req
    submitted: float = field(default_factory=time.perf_counter)
    done: threading.Event = field(default_factory=threading.Event)
    output: Out | None = None
    error: BaseException | None = None
    batch_runs: int = 0  # distinct runs whose requests shared the batch
    wait_s: float = 0.0  # from submission to the start of its batch


class RequestBatcher(Generic[Req, Out]):
    """Runs queued jobs through `execute(requests) -> outputs` (same order), several at once in "batch" mode."""

    def __init__(self, execute: Callable[[Sequence[Req]], list[Out]], *, mode: str = "batch",
                 window_s: float = 0.02, target: Callable[[], int] = lambda: 1) -> None:
        if mode not in BATCHING_MODES:
            raise ValueError(f"batching mode {mode!r}: use one of {BATCHING_MODES}")
        self._execute, self.mode, self.window_s, self._target = execute, mode, window_s, target
        self._cond = threading.Condition()
        self._pending: list[Job[Req, Out]] = []
        self._leading = False  # a caller is collecting or running a batch
        self.batches = 0
        self.waiting = 0  # jobs queued, not yet in a running batch
        self.running = 0  # jobs in the batch that runs now

    def submit(self, job: Job[Req, Out]) -> Job[Req, Out]:
        """Queues `job`, waits until a batch has served it (leading batches itself when no one else is)."""
        with self._cond:
            self._pending.append(job)
            self.waiting += 1
            self._cond.notify_all()
            while self._leading and not job.done.is_set():
                self._cond.wait()
            if job.done.is_set():
                return job
            self._leading = True
        try:
            while not job.done.is_set():
                self._run(self._collect())
        finally:
            with self._cond:
                self._leading = False
                self._cond.notify_all()
        return job

    def _collect(self) -> list[Job[Req, Out]]:
        with self._cond:
            if self.mode == "serial":
                batch = [self._pending.pop(0)]
            else:
                deadline = time.perf_counter() + self.window_s
                while len({j.run for j in self._pending}) < self._target():
                    left = deadline - time.perf_counter()
                    if left <= 0:
                        break
                    self._cond.wait(left)
                batch, self._pending = self._pending, []
            self.waiting -= len(batch)
            self.running = len(batch)
            return batch

    def _run(self, batch: list[Job[Req, Out]]) -> None:
        started = time.perf_counter()
        runs = len({j.run for j in batch})
        for job in batch:
            job.batch_runs, job.wait_s = runs, started - job.submitted
        try:
            outputs = self._execute([j.request for j in batch])
            for job, out in zip(batch, outputs, strict=True):
                job.output = out
        except BaseException as err:  # every caller of the batch sees the engine's error
            for job in batch:
                job.error = err
        with self._cond:
            self.batches += 1
            self.running = 0
            for job in batch:
                job.done.set()
            self._cond.notify_all()
