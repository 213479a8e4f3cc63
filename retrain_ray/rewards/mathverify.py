"""`math` reward: symbolic equivalence through the `math_verify` library.

As the original's `VerifiersMathReward`: the last boxed answer of the completion and the reference
are each parsed as `math_verify.parse("\\boxed{...}")` (reference parses cached), then
`verify(gold, prediction)`; a missing answer, a parse failure or any exception scores 0.0.

Departure: `math_verify` enforces its timeouts with `signal.alarm`, which only works in a process's
main thread. Scoring from the main thread calls it directly; scoring from any other thread (Ray
async actors, thread pools) sends the batch to one spawned worker process, where the timeouts work,
and waits at most `timeout_s` per pair (plus start-up slack). A batch that overruns scores 0.0 and
the worker is replaced.

With `[reward] workers = N` > 1 every batch is scored item by item across N worker processes
(`rewards/parallel.py`), each item waited on for at most twice `timeout_s` (two parses and a
verify, each bounded by `timeout_s`); an item that overruns scores 0.0.
"""

from __future__ import annotations

import multiprocessing
import threading
import weakref
from typing import Any

from retrain_ray.rewards.boxed import boxed, extract_boxed
from retrain_ray.rewards.parallel import WorkerPool
from retrain_ray.rewards.types import check_batch

WORKER_START_SLACK_S = 60.0
_WORKER_CACHE: dict[str, Any] = {}


def _parse(text: str, timeout_s: int) -> Any:
    # deferred: math_verify is an optional extra, imported only when used
    from math_verify import parse

    return parse(boxed(text), parsing_timeout=timeout_s)


def score_pair(completion: str, reference: str, timeout_s: int, ref_cache: dict[str, Any]) -> float:
    """Score one pair in the calling thread (must be a main thread when timeout_s > 0)."""
    # deferred: math_verify is an optional extra, imported only when used
    from math_verify import verify

    try:
        answer = extract_boxed(completion)
        if not answer:
            return 0.0
        if reference not in ref_cache:
            ref_cache[reference] = _parse(reference, timeout_s)
        gold = ref_cache[reference]
        prediction = _parse(answer, timeout_s)
        if not gold or not prediction:
            return 0.0
        return 1.0 if verify(gold, prediction, timeout_seconds=timeout_s) else 0.0
    except Exception:
        return 0.0


def _score_pairs_in_worker(pairs: list[tuple[str, str]], timeout_s: int) -> list[float]:
    return [score_pair(c, r, timeout_s, _WORKER_CACHE) for c, r in pairs]


def _score_one_in_worker(completion: str, reference: str, timeout_s: int) -> float:
    return score_pair(completion, reference, timeout_s, _WORKER_CACHE)


def _terminate(pool: Any) -> None:
    pool.terminate()


class MathVerifyReward:
    """1.0 when `math_verify` judges the boxed answer equivalent to the reference, else 0.0."""

    name = "math"

    def __init__(self, timeout_s: int = 5, workers: int = 1) -> None:
        if timeout_s <= 0:
            raise ValueError(f"math reward timeout_s must be > 0 seconds, got {timeout_s}")
        import math_verify  # noqa: F401  (fail at build time, not at the first step)

        self.timeout_s = timeout_s
        self._ref_cache: dict[str, Any] = {}
        self._pool: Any = None
        self._finalizer: Any = None
        self._workers = WorkerPool(workers, _score_one_in_worker, "math") if workers > 1 else None

    def score_batch(self, completions: list[str], references: list[str]) -> list[float]:
        check_batch(completions, references)
        if self._workers is not None:
            items = [(c, r, self.timeout_s) for c, r in zip(completions, references, strict=True)]
            return self._workers.map(items, timeout_s=self.timeout_s * 2, timeout_value=0.0)
        if threading.current_thread() is threading.main_thread():
            return [score_pair(c, r, self.timeout_s, self._ref_cache) for c, r in zip(completions, references, strict=True)]
        return self._score_in_worker(list(zip(completions, references, strict=True)))

    def _score_in_worker(self, pairs: list[tuple[str, str]]) -> list[float]:
        if not pairs:
            return []
        if self._pool is None:
            self._pool = multiprocessing.get_context("spawn").Pool(1)
            self._finalizer = weakref.finalize(self, _terminate, self._pool)
        pending = self._pool.apply_async(_score_pairs_in_worker, (pairs, self.timeout_s))
        try:
            return pending.get(timeout=self.timeout_s * len(pairs) * 2 + WORKER_START_SLACK_S)
        except multiprocessing.TimeoutError:
            self.close()
            return [0.0] * len(pairs)

    def close(self) -> None:
        """Stop the worker processes, if any were started."""
        if self._workers is not None:
            self._workers.close()
        if self._finalizer is not None:
            self._finalizer()
        self._pool = None
        self._finalizer = None
