"""Environment calls of a multi-turn step on a pool of worker threads (`[environment] rollout_env_workers`).

An environment may block on I/O (an OpenEnv server over a socket, a verifiers environment calling a tool),
so the episodes of one turn are reset and stepped by `workers` threads instead of one after another.
Results come back in the episodes' order whatever order the workers finish in, so a run is the same with
1 worker or many (each episode's calls stay on one episode; episodes share nothing the run relies on).
`rollout_buffer_size` bounds how far the workers may run ahead of the loop that collects their results in
order: at most `workers + buffer` calls are submitted and not yet collected (0: the whole turn at once).
A worker's exception stops the step: it is raised again in the run's thread, as itself (so the CLI reports an
environment's own errors as it always does), with a note naming the environment and the episode.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


class EnvPool:
    """Maps an environment call over a turn's episodes, in order, on `workers` threads (1: in the caller)."""

    def __init__(self, name: str, *, workers: int = 1, buffer: int = 0) -> None:
        if workers < 1 or buffer < 0:
            raise ValueError(f"rollout_env_workers must be >= 1 and rollout_buffer_size >= 0 (got {workers}, {buffer})")
        self.name = name
        self.workers = workers
        self.window = workers + buffer if buffer > 0 else 0  # 0: no bound
        self._executor = ThreadPoolExecutor(workers, thread_name_prefix=f"env-{name}") if workers > 1 else None

    def map(self, call: Callable[[T], R], items: Sequence[T], describe: Callable[[T], str]) -> list[R]:
        """`[call(item) for item in items]`, the calls spread over the workers; raises the exception of the first
        item (in order) whose call raised, noting `describe(item)`."""
        if self._executor is None:
            return [call(item) for item in items]  # one worker: the calls in the caller's thread, as before
        return list(self._ordered(call, items, describe, self._executor))

    def _ordered(self, call: Callable[[T], R], items: Sequence[T], describe: Callable[[T], str],
                 executor: ThreadPoolExecutor) -> Iterator[R]:
        window = self.window or len(items)
        pending: deque[tuple[T, Future[R]]] = deque()
        upcoming = iter(items)
        try:
            for item in upcoming:
                pending.append((item, executor.submit(call, item)))
                if len(pending) >= window:
                    yield self._collect(*pending.popleft(), describe)
            while pending:
                yield self._collect(*pending.popleft(), describe)
        finally:
            for _, future in pending:  # a failed episode stops the step: calls not yet started are dropped
                future.cancel()

    def _collect(self, item: T, future: Future[R], describe: Callable[[T], str]) -> R:
        try:
            return future.result()
        except Exception as exc:  # the worker's own error, raised in the run's thread, noting its episode
            exc.add_note(f"(in an environment worker of {self.name}: {describe(item)})")
            raise

    def close(self) -> None:
        """Stops the workers (waiting for calls already running: an environment call is not interrupted)."""
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> EnvPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
