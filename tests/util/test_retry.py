"""The retry helper for remote endpoints: what is retried, how often, and what is raised at the end."""

from __future__ import annotations

import httpx
import pytest

from retrain_ray.util.retry import AmbiguousCallError, RetryCounters, RetryPolicy, call_with_retry

FAST = RetryPolicy(max_attempts=3, backoff_s=0.001)


def _failing(errors: list[BaseException], result: str = "ok"):
    calls = []

    def fn() -> str:
        calls.append(1)
        if len(calls) <= len(errors):
            raise errors[len(calls) - 1]
        return result

    return fn, calls


def _status(code: int) -> httpx.HTTPStatusError:
    request = httpx.Request("POST", "http://127.0.0.1/x")
    return httpx.HTTPStatusError("bad", request=request, response=httpx.Response(code, request=request))


def test_transient_errors_are_retried_and_counted():
    fn, calls = _failing([TimeoutError(), _status(503)])
    counters = RetryCounters()
    assert call_with_retry(fn, what="sample", policy=FAST, counters=counters) == "ok"
    assert (len(calls), counters.retries, counters.failures) == (3, 2, 0)


def test_exhausted_retries_name_the_call_and_the_attempts():
    fn, calls = _failing([_status(502)] * 5)
    counters = RetryCounters()
    with pytest.raises(RuntimeError, match=r"sample failed 3 time\(s\).*max_attempts"):
        call_with_retry(fn, what="sample", policy=FAST, counters=counters)
    assert (len(calls), counters.retries, counters.failures) == (3, 2, 1)


def test_a_permanent_error_is_raised_at_once():
    fn, calls = _failing([ValueError("bad request")])
    counters = RetryCounters()
    with pytest.raises(ValueError, match="bad request"):
        call_with_retry(fn, what="sample", policy=FAST, counters=counters)
    assert (len(calls), counters.retries, counters.failures) == (1, 0, 0)


def test_a_call_that_must_run_once_is_retried_only_when_the_server_surely_did_not_run_it():
    fn, calls = _failing([_status(503)])  # 503: not processed, safe to retry
    assert call_with_retry(fn, what="step", policy=FAST, counters=RetryCounters(), idempotent=False) == "ok"
    assert len(calls) == 2
    fn, calls = _failing([_status(504)])  # 504: the server may have run it
    counters = RetryCounters()
    with pytest.raises(AmbiguousCallError, match="may have reached the server"):
        call_with_retry(fn, what="step", policy=FAST, counters=counters, idempotent=False)
    assert (len(calls), counters.failures) == (1, 1)


def test_backoff_doubles_up_to_its_bound():
    policy = RetryPolicy(max_attempts=10, backoff_s=1.0)
    assert [policy.delay_s(a) for a in (1, 2, 3, 6, 7)] == [1.0, 2.0, 4.0, 30.0, 30.0]
