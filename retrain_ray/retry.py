"""Bounded retries with exponential backoff for transient failures of a remote API.

Transient: HTTP 502, 503 and 504 (an `APIStatusError` of the tinker SDK or any exception with such a
`status_code`, or an `httpx.HTTPStatusError`), timeouts (`TimeoutError`, which includes
`concurrent.futures.TimeoutError`, the SDK's `APITimeoutError`, `httpx.TimeoutException`) and dropped
connections (`APIConnectionError`, `httpx.TransportError`). Anything else is raised at once. Every
retry is counted in `RetryCounters.retries` so the metrics row shows it (`tinker_retries`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import httpx

log = logging.getLogger(__name__)

T = TypeVar("T")
TRANSIENT_STATUS = frozenset({502, 503, 504})
MAX_BACKOFF_S = 30.0


def _status_of(err: BaseException) -> int | None:
    status = getattr(err, "status_code", None)
    if isinstance(status, int):
        return status
    response = getattr(err, "response", None)
    status = getattr(response, "status_code", None)
    return status if isinstance(status, int) else None


def is_transient(err: BaseException) -> bool:
    """True for errors worth retrying: 502/503/504, timeouts, dropped connections."""
    if isinstance(err, (TimeoutError, httpx.TimeoutException, httpx.TransportError)):
        return True
    try:
        # deferred: tinker is an optional extra, imported only when used
        import tinker

        if isinstance(err, tinker.APIConnectionError):  # includes APITimeoutError
            return True
    except ImportError:  # the SDK is an optional extra
        pass
    return _status_of(err) in TRANSIENT_STATUS


NOT_PROCESSED_STATUS = (429, 503)
"""Statuses by which a server says it did not run the request (rate limited, unavailable)."""


class AmbiguousCallError(ConnectionError):
    """A call that must run at most once failed in a way that leaves open whether the server ran it."""


def was_not_processed(err: BaseException) -> bool:
    """True when the request surely did not run on the server: refused connection, 429, 503.

    502, 504, timeouts and dropped connections are ambiguous: the server may have run the call and
    only the answer was lost. Only these safe failures are retried for calls that must not run twice.
    """
    if isinstance(err, httpx.ConnectError):
        return True
    return _status_of(err) in NOT_PROCESSED_STATUS


@dataclass
class RetryCounters:
    """Counts of retried attempts and of requests that failed after every attempt."""

    retries: int = 0
    failures: int = 0


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int = 5
    backoff_s: float = 1.0

    def delay_s(self, attempt: int) -> float:
        """Wait before attempt `attempt + 1` (attempt counts from 1)."""
        return min(self.backoff_s * 2 ** (attempt - 1), MAX_BACKOFF_S)


def call_with_retry(fn: Callable[[], T], *, what: str, policy: RetryPolicy, counters: RetryCounters,
                    idempotent: bool = True) -> T:
    """`fn()`, retried on transient errors up to `policy.max_attempts` attempts in all.

    `idempotent=False` (a call that changes server state, e.g. a gradient accumulation): only failures
    that prove the server did not run it are retried; an ambiguous one raises `AmbiguousCallError`,
    so a retry never applies the call twice.
    """
    for attempt in range(1, policy.max_attempts + 1):
        try:
            return fn()
        except Exception as err:
            if not idempotent and is_transient(err) and not was_not_processed(err):
                counters.failures += 1
                raise AmbiguousCallError(
                    f"{what} failed with {err!r} after it may have reached the server; it is not retried, "
                    "since running it twice would apply it twice. The run stops here and resumes from its last "
                    "checkpoint (a campaign retries it; `retrain-ray train --resume RUN_DIR` by hand)"
                ) from err
            if not is_transient(err) or attempt == policy.max_attempts:
                counters.failures += is_transient(err)
                if is_transient(err):
                    raise RuntimeError(
                        f"{what} failed {attempt} time(s) with transient errors, last: {err!r}; the endpoint "
                        "is unhealthy or overloaded: retry later, or raise [backend.options] max_attempts"
                    ) from err
                raise
            counters.retries += 1
            log.warning("%s: transient failure %r (attempt %d/%d), retrying", what, err, attempt, policy.max_attempts)
            time.sleep(policy.delay_s(attempt))
    raise AssertionError("unreachable")
