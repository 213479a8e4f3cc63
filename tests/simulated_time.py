"""A shared endpoint and its runs on simulated time, for testing the pooled controller's decisions.

The same model as `retrain_ray.actors.simulated_endpoint.SimulatedEndpoint` (fluid processor sharing:
with N items in flight every request finishes lam / (1 + sigma*(N-1) + kappa*N*(N-1)) of its work
per second), but as a discrete-event simulation: no threads, no Ray, no wall clock. So the closed loop
runs run -> throttle (FIFO, capacity set by the controller) -> endpoint -> controller and gives the same
decisions on a loaded machine as on a quiet one.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from retrain_ray.backpressure.pooled import PooledController
from retrain_ray.backpressure.types import StepObservation


@dataclass
class _Request:
    run: str
    items: int
    asked_at: float
    started_at: float = 0.0
    remaining: float = 1.0


@dataclass
class SimulatedLoop:
    """`runs` runs, each sending requests of `items` items back to back through a throttle whose
    capacity the pooled controller sets after every step."""

    controller: PooledController
    runs: int
    items: int
    sigma: float
    kappa: float
    lam: float
    now: float = 0.0
    steps: list[tuple[float, str, int]] = field(default_factory=list)  # (time, run, capacity in force)
    _queue: deque[_Request] = field(default_factory=deque)
    _serving: list[_Request] = field(default_factory=list)
    _step_of: dict[str, int] = field(default_factory=dict)

    def run_until(self, t_end: float) -> None:
        if not self._step_of:
            for r in range(self.runs):
                self._ask(f"r{r}")
        while self.now < t_end:
            self._admit()
            self._advance_to_next_completion()

    def _ask(self, run: str) -> None:
        self._step_of.setdefault(run, 0)
        self._queue.append(_Request(run, self.items, asked_at=self.now))

    def _admit(self) -> None:
        while self._queue and len(self._serving) < self.controller.capacity:
            request = self._queue.popleft()
            request.started_at = self.now
            self._serving.append(request)

    def _rate(self) -> float:
        n = max(1, sum(r.items for r in self._serving))
        return self.lam / (1.0 + self.sigma * (n - 1) + self.kappa * n * (n - 1))

    def _advance_to_next_completion(self) -> None:
        rate = self._rate()
        first = min(self._serving, key=lambda r: r.remaining)
        dt = first.remaining / rate
        self.now += dt
        for request in self._serving:
            request.remaining -= dt * rate
        done = [r for r in self._serving if r.remaining <= 1e-12]
        self._serving = [r for r in self._serving if r.remaining > 1e-12]
        for request in done:
            self._complete(request)

    def _complete(self, request: _Request) -> None:
        capacity = self.controller.capacity
        step = self._step_of[request.run]
        self.controller.observe(StepObservation(
            request.run, step, request.items, 1, total_tokens=16 * request.items,
            step_time_s=self.now - request.asked_at, sample_time_s=self.now - request.started_at,
            resource="ep"))
        self.steps.append((self.now, request.run, capacity))
        self._step_of[request.run] = step + 1
        self._ask(request.run)
