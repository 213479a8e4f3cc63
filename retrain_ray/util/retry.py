"""Bounded retries with exponential backoff for transient failures of a remote API.

Transient: HTTP 502, 503 and 504 (an `APIStatusError` of the tinker SDK or any exception with such a
`status_code`, or an `httpx.HTTPStatusError`), timeouts (`TimeoutError`, which includes
`concurrent.futures.TimeoutError`, the SDK's `APITimeoutError`, `httpx.TimeoutException`) and dropped
connections (`APIConnectionError`, `httpx.TransportError`). Anything else is raised at once. Every
retry is counted in `RetryCounters.retries` so the metrics row shows it (`tinker_retries`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import httpx
import tenacity

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
        """Wait before attempt `attempt + 1` (attempt counts from 1); tenacity's `wait_exponential`."""
        return min(self.backoff_s * 2 ** (attempt - 1), MAX_BACKOFF_S)


def call_with_retry(fn: Callable[[], T], *, what: str, policy: RetryPolicy, counters: RetryCounters,
                    idempotent: bool = True) -> T:
    """`fn()`, retried (by tenacity) on transient errors up to `policy.max_attempts` attempts in all.

    `idempotent=False` (a call that changes server state, e.g. a gradient accumulation): only failures
    that prove the server did not run it are retried; an ambiguous one raises `AmbiguousCallError`,
    so a retry never applies the call twice.
    """

    def retryable(err: BaseException) -> bool:
        return is_transient(err) and (idempotent or was_not_processed(err))

    def count_retry(state: tenacity.RetryCallState) -> None:
        counters.retries += 1
        err = state.outcome.exception() if state.outcome else None
        log.warning("%s: transient failure %r (attempt %d/%d), retrying", what, err, state.attempt_number,
                    policy.max_attempts)

    retrying = tenacity.Retrying(
        stop=tenacity.stop_after_attempt(policy.max_attempts),
        wait=tenacity.wait_exponential(multiplier=policy.backoff_s, max=MAX_BACKOFF_S),
        retry=tenacity.retry_if_exception(retryable),
        before_sleep=count_retry,
        reraise=True,
    )
    try:
        return retrying(fn)
    except Exception as err:
        if not is_transient(err):
            raise
        counters.failures += 1
        raise _final_error(err, what, retrying.statistics.get("attempt_number", 1), idempotent) from err


def _final_error(err: Exception, what: str, attempts: int, idempotent: bool) -> Exception:
    if not idempotent and not was_not_processed(err):
        return AmbiguousCallError(
            f"{what} failed with {err!r} after it may have reached the server; it is not retried, "
            "since running it twice would apply it twice. The run stops here and resumes from its last "
            "checkpoint (a campaign retries it; `retrain-ray train --resume RUN_DIR` by hand)"
        )
    return RuntimeError(
        f"{what} failed {attempts} time(s) with transient errors, last: {err!r}; the endpoint "
        "is unhealthy or overloaded: retry later, or raise [backend.options] max_attempts"
    )
