"""SimulatedEndpoint: a shared inference endpoint whose throughput follows a known USL curve.

CPUs do not go retrograde (DESIGN.md), so back-pressure tests and the benchmark need an endpoint
with a known optimum. Model (processor sharing, fluid): with N items in flight the endpoint
completes X(N) = lam * N / (1 + sigma*(N-1) + kappa*N*(N-1)) items/s, shared equally by the items,
so every request (all its items progress together) finishes a fraction
    X(N) / N = lam / (1 + sigma*(N-1) + kappa*N*(N-1))
of its work per second, whatever its size. `serve(n_items)` adds its items to N, advances its work
in ticks of at most `tick_s` using the measured elapsed time and the current N (so arrivals and
departures during a request change its speed), then removes them. Peak throughput is at
N* = sqrt((1-sigma)/kappa) items. `error_above` > 0 makes requests that arrive while more than that
many items are in flight report one endpoint error (they are still served).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, cast

import ray

from retrain_ray.backpressure.types import StepObservation

__all__ = ["RecordingAdvisor", "SimulatedEndpoint", "simulated_run"]


@ray.remote(num_cpus=0, max_concurrency=1000)  # pyright: ignore[reportCallIssue]  # ray's overloads omit max_concurrency
class SimulatedEndpoint:
    """Async actor; all requests share one event loop, so in-flight bookkeeping needs no locks."""

    def __init__(self, sigma: float, kappa: float, lam: float, tokens_per_item: int = 16,
                 tick_s: float = 0.005, error_above: int = 0) -> None:
        if not (0.0 <= sigma <= 1.0 and kappa >= 0.0 and lam > 0.0 and tick_s > 0.0):
            raise ValueError(f"SimulatedEndpoint needs 0<=sigma<=1, kappa>=0, lam>0, tick_s>0; got "
                             f"sigma={sigma!r}, kappa={kappa!r}, lam={lam!r}, tick_s={tick_s!r}")
        self.sigma, self.kappa, self.lam = float(sigma), float(kappa), float(lam)
        self.tokens_per_item, self.tick_s = int(tokens_per_item), float(tick_s)
        self.error_above = int(error_above)
        self.in_flight = 0
        self.reset_stats()

    def _rate(self) -> float:
        n = max(1, self.in_flight)
        return self.lam / (1.0 + self.sigma * (n - 1) + self.kappa * n * (n - 1))

    async def serve(self, n_items: int) -> dict[str, Any]:
        """Serve one request of `n_items`; returns its size, tokens, service time and errors."""
        n_items = max(1, int(n_items))
        errors = int(self.error_above > 0 and self.in_flight + n_items > self.error_above)
        self.in_flight += n_items
        self._peak = max(self._peak, self.in_flight)
        start = last = time.monotonic()
        remaining = 1.0
        try:
            while remaining > 0.0:
                await asyncio.sleep(min(self.tick_s, remaining / self._rate()))
                now = time.monotonic()
                remaining -= (now - last) * self._rate()
                last = now
        finally:
            self.in_flight -= n_items
        self._served += n_items
        self._requests += 1
        self._errors += errors
        return {"items": n_items, "tokens": n_items * self.tokens_per_item,
                "service_s": time.monotonic() - start, "errors": errors}

    def stats(self) -> dict[str, Any]:
        elapsed = time.monotonic() - self._since
        return {"peak_in_flight": self._peak, "served_items": self._served, "requests": self._requests,
                "errors": self._errors, "elapsed_s": elapsed,
                "items_per_s": self._served / elapsed if elapsed > 0 else 0.0}

    def reset_stats(self) -> None:
        self._peak, self._served, self._requests, self._errors = self.in_flight, 0, 0, 0
        self._since = time.monotonic()


class RecordingAdvisor:
    """Wraps a run's advisor and logs (completion time, tokens, pooled capacity) of every step."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.steps: list[tuple[float, int, int | None]] = []

    def initial_batch_size(self, batch_size: int, start_step: int = 0) -> int:
        if hasattr(self.inner, "initial_batch_size"):
            return self.inner.initial_batch_size(batch_size, start_step)
        return batch_size

    def advise(self, obs: Any) -> Any:
        done = time.monotonic()
        d = self.inner.advise(obs)
        self.steps.append((done, obs.total_tokens, getattr(d, "capacity", None)))
        return d


def simulated_run(endpoint: Any, advisor: Any, throttle: Any, *, run_id: str, resource: str,
                  batch_size: int, group_size: int, deadline: float, train_s_per_item: float = 0.0,
                  timeout_s: float = 60.0, min_steps: int = 0) -> dict[str, Any]:
    """A run's step loop against the endpoint, until `deadline` (time.monotonic) and at least `min_steps`
    steps (so a test on a loaded machine still sees steps); call in a thread.

    Each step: hold a throttle slot -> serve batch_size*group_size items -> release -> local "training"
    (sleep train_s_per_item per item) -> report a StepObservation to the advisor and take its batch
    size. `throttle` has `hold()` (ThrottleClient or NoThrottle); `advisor` is a BackPressureAdvisor.
    """
    bs = advisor.initial_batch_size(batch_size) if hasattr(advisor, "initial_batch_size") else batch_size
    tokens = steps = errors = 0
    sizes = []
    while steps < min_steps or time.monotonic() < deadline:
        t0 = time.monotonic()
        with throttle.hold():
            t1 = time.monotonic()
            out = cast("dict[str, int]", ray.get(endpoint.serve.remote(bs * group_size), timeout=timeout_s))
            sample_s = time.monotonic() - t1
        time.sleep(train_s_per_item * bs * group_size)
        step_s = time.monotonic() - t0
        d = advisor.advise(StepObservation(
            run_id, steps, bs, group_size, out["tokens"], step_s, sample_time_s=sample_s,
            train_time_s=step_s - sample_s - (t1 - t0), resource=resource, endpoint_errors=out["errors"]))
        tokens, steps, errors = tokens + out["tokens"], steps + 1, errors + out["errors"]
        sizes.append(bs)
        bs = d.recommended_batch_size
    return {"run": run_id, "tokens": tokens, "steps": steps, "errors": errors, "batch_sizes": sizes}
