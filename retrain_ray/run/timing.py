"""Timing through a context manager instead of time.time() pairs in the loop."""

from __future__ import annotations

import time
from collections.abc import Generator, MutableMapping
from contextlib import contextmanager


@contextmanager
def timed(metrics: MutableMapping[str, float], key: str) -> Generator[None, None, None]:
    """Adds the wall time of the block, in seconds, to `metrics[key]`."""
    start = time.perf_counter()
    try:
        yield
    finally:
        metrics[key] = metrics.get(key, 0.0) + (time.perf_counter() - start)
