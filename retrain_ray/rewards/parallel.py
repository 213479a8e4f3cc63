"""`[reward] workers = N`: score a batch item by item across N spawned worker processes.

The pool is started at the first batch and reused for the rest of the run. At most N items are in
flight, so each item starts as soon as it is submitted and its timeout counts from then (plus a
start-up allowance while a fresh pool has not answered yet). An item that overruns its timeout has
its pool killed and replaced; a worker that dies (`BrokenProcessPool`) is replaced the same way.
Either way the items whose results were already received are kept, and only the others are
submitted again, so a batch is scored once; a batch whose pool breaks more than `MAX_RESTARTS`
times fails with an error naming the reward. Results come back in input order.

Spawned rather than forked: the run shares its process with Ray's threads, which fork does not copy.
"""

from __future__ import annotations

import collections
import multiprocessing
import time
import weakref
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any

WORKER_START_SLACK_S = 60.0
MAX_RESTARTS = 3


class ItemTimeoutError(TimeoutError):
    """One item overran its timeout; `index` is its position in the batch."""

    def __init__(self, index: int, timeout_s: float) -> None:
        super().__init__(f"item {index} did not finish within {timeout_s:g} s")
        self.index = index


def _kill(pool: ProcessPoolExecutor) -> None:
    # no public way to stop a stuck worker before Python 3.14 (terminate_workers)
    processes = list((getattr(pool, "_processes", None) or {}).values())
    for process in processes:
        process.kill()
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        process.join(5.0)


class WorkerPool:
    """`workers` processes calling the picklable top-level `fn(*item)` on each item of a batch."""

    def __init__(self, workers: int, fn: Callable[..., Any], label: str) -> None:
        if workers < 1:
            raise ValueError(f"[reward] workers = {workers}: use an integer >= 1")
        self.workers = workers
        self.fn = fn
        self.label = label
        self._pool: ProcessPoolExecutor | None = None
        self._finalizer: Any = None
        self._warm = False

    def map(self, items: list[tuple[Any, ...]], timeout_s: float, timeout_value: Any = None) -> list[Any]:
        """`[fn(*item) for item in items]` in order. An item that overruns `timeout_s` gets
        `timeout_value`, or raises `ItemTimeoutError` when that is None. An exception raised by
        `fn` is raised here."""
        results: dict[int, Any] = {}
        queue = collections.deque(range(len(items)))
        inflight: dict[Future[Any], tuple[int, float]] = {}
        restarts = 0
        while queue or inflight:
            broken = not self._submit(queue, inflight, items, timeout_s)
            done, _ = wait(inflight, timeout=self._wait_s(inflight), return_when=FIRST_COMPLETED)
            for future in done:
                index, _deadline = inflight.pop(future)
                try:
                    results[index] = future.result()
                    self._warm = True
                except BrokenProcessPool:
                    broken = True
                    queue.appendleft(index)
            expired = [f for f, (_i, deadline) in inflight.items() if time.monotonic() >= deadline and not f.done()]
            if broken or expired:
                for future in expired:
                    index = inflight.pop(future)[0]
                    if timeout_value is None:
                        self.close()
                        raise ItemTimeoutError(index, timeout_s)
                    results[index] = timeout_value
                restarts += 1 if broken else 0
                if restarts > MAX_RESTARTS:
                    self.close()
                    raise RuntimeError(
                        f"reward {self.label}: a worker process died {restarts} times while scoring one batch "
                        f"({len(results)} of {len(items)} items scored); the reward crashes its process "
                        "(os._exit, a segfault, running out of memory): fix it, or set [reward] workers = 1 to see its error"
                    )
                queue.extendleft(sorted((i for i, _d in inflight.values()), reverse=True))
                inflight.clear()
                self.close()
        return [results[i] for i in range(len(items))]

    def _submit(self, queue: collections.deque[int], inflight: dict[Future[Any], tuple[int, float]],
                items: list[tuple[Any, ...]], timeout_s: float) -> bool:
        """Fill the free workers; False when the pool turned out broken."""
        pool = self._ensure()
        while queue and len(inflight) < self.workers:
            index = queue.popleft()
            allowance = 0.0 if self._warm else WORKER_START_SLACK_S
            try:
                future = pool.submit(self.fn, *items[index])
            except BrokenProcessPool:
                queue.appendleft(index)
                return False
            inflight[future] = (index, time.monotonic() + timeout_s + allowance)
        return True

    def _wait_s(self, inflight: dict[Future[Any], tuple[int, float]]) -> float:
        if not inflight:
            return 0.0
        return max(0.0, min(deadline for _i, deadline in inflight.values()) - time.monotonic())

    def _ensure(self) -> ProcessPoolExecutor:
        if self._pool is None:
            self._pool = ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("spawn"))
            self._finalizer = weakref.finalize(self, _kill, self._pool)
            self._warm = False
        return self._pool

    def close(self) -> None:
        """Stop the worker processes, if started; the next batch starts fresh ones."""
        if self._finalizer is not None:
            self._finalizer()
        self._pool = None
        self._finalizer = None
