"""Pooled back pressure: one USL fit per shared resource over all runs that use it.

A single run cannot see cross-run contention: its own p moves, everybody else's load is noise. The
pooled controller fits USL to (N, X) where N is the endpoint's in-flight concurrency summed over runs
and X the campaign's throughput summed over runs, and recommends the endpoint's capacity (the
throttle's number of concurrent requests).

Aggregation is per *round*, not per time window (so the class needs no clock and is tested event by
event): a round closes when every active run (seen in the last `stale_rounds` rounds) has reported
since the previous close, or when one run has reported `max_reports_per_round` times (so a dead or
slow run cannot stall the fit). The round's point is built from each active run's latest
observation by Little's law, steady state assumed:
    X = Σ_r total_tokens_r / step_time_r                         (campaign tokens/s)
    N = Σ_r p_r · sample_time_r / step_time_r                    (mean items in flight at the endpoint)
with p_r = batch_size·group_size and sample_time the time the request spent at the endpoint after
the throttle granted it (sample_time <= 0 counts as the whole step). A round is not fitted when it
follows a capacity change (its observations straddle two capacities) or when runs joined or left.

Capacity: warmup is a sweep over the ladder 1, 2, 4, ... up to min(active runs, max_capacity)
(appended), so the fit sees N vary. Each rung is held until one round at it is fitted (in steady
conditions two rounds: the round after the change straddles two capacities and is discarded, the
next is fitted). The sweep ends when the ladder is exhausted, when retrograde is seen (at least 3
fitted rungs and the last rung's X is more than `sweep_drop` below the best rung's: kappa is then
identified and higher rungs only cost throughput), or after `warmup_rounds` rounds at the latest.
Departure from the first version (fixed schedule 1,1,2,2,4,4,... indexed by round, cyclic): that
schedule never fitted capacity 1 (its first round straddled the change), wrapped around when the
ladder was shorter than warmup_rounds, and always swept to the top rung even past the peak.
Afterwards
    capacity = clamp(round(p* · throttle_margin / per_request_concurrency), min_capacity, max_capacity)
with per_request_concurrency the items in flight per granted slot measured in the last fitted round,
N / min(capacity, active runs): smaller than p_r when slots also cover client overheads or runs spend
time outside the endpoint (falls back to the mean p_r before any fitted round). With kappa ~ 0 (no
retrograde seen) the target is the number of active runs: the highest capacity the sweep measured,
so runs that join later are not admitted past what has been observed (their arrival restarts the
round and the ladder extends to them). Endpoint errors/timeouts in a round cut the capacity
multiplicatively (`error_cut`, AIMD): a ceiling drops to max(min_capacity, floor(capacity·error_cut))
and then rises by one per error-free round, and the capacity is min(target, ceiling).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from retrain_ray.backpressure.fit import EPS, USLWindow
from retrain_ray.backpressure.types import StepObservation


@dataclass(frozen=True)
class PooledDecision:
    """The pooled fit of one shared resource. Frozen and picklable."""

    resource: str
    rounds: int
    p_star: float
    sigma: float
    kappa: float
    lam: float
    capacity: int
    warmup: bool
    changed: bool = False


@dataclass
class _RunView:
    p: float
    busy_frac: float
    tokens_per_s: float
    last_round: int


class PooledController:
    """Round-based pooled USL fit and capacity recommendation for one shared resource."""

    def __init__(self, resource: str, *, throttle_margin: float = 0.85, min_capacity: int = 1,
                 max_capacity: int = 64, error_cut: float = 0.5, warmup_rounds: int = 16,
                 window: int = 100, stale_rounds: int = 3, max_reports_per_round: int = 3,
                 sweep_drop: float = 0.05) -> None:
        if not 0.0 < error_cut < 1.0:
            raise ValueError(f"backpressure.error_cut must be in (0, 1), got {error_cut!r}")
        if min_capacity < 1 or max_capacity < min_capacity:
            raise ValueError(f"pooled capacity bounds need 1 <= min_capacity <= max_capacity, "
                             f"got {min_capacity!r}..{max_capacity!r}")
        if not 0.0 < throttle_margin <= 1.0:
            raise ValueError(f"backpressure.throttle_margin must be in (0, 1], got {throttle_margin!r}")
        if not 0.0 < sweep_drop < 1.0:
            raise ValueError(f"backpressure.sweep_drop must be in (0, 1), got {sweep_drop!r}")
        self.resource = resource
        self.throttle_margin, self.error_cut = float(throttle_margin), float(error_cut)
        self.min_capacity, self.max_capacity = int(min_capacity), int(max_capacity)
        self.warmup_rounds, self.stale_rounds = int(warmup_rounds), int(stale_rounds)
        self.max_reports_per_round = int(max_reports_per_round)
        self.sweep_drop = float(sweep_drop)
        self.warming = self.warmup_rounds > 0
        self.sweep_x: list[float] = []  # campaign X of each fitted sweep rung, in ladder order
        self.window = USLWindow(window)
        self.runs: dict[str, _RunView] = {}
        self.reports: dict[str, int] = {}
        self.round = 0
        self.errors_in_round = 0
        self.discard_next = False
        self.members: frozenset[str] = frozenset()
        self.items_per_slot = 0.0
        self.sigma, self.kappa, self.lam, self.p_star = 0.0, 0.0, 0.0, 1.0
        self.capacity = self.max_capacity
        self.ceiling = self.max_capacity

    def observe(self, obs: StepObservation) -> PooledDecision:
        """Take one run's step; close the round when it is complete; return the current decision."""
        self.errors_in_round += max(0, int(obs.endpoint_errors))
        if not obs.skipped and obs.step_time_s > EPS:
            busy = obs.sample_time_s / obs.step_time_s if obs.sample_time_s > 0 else 1.0
            self.runs[obs.run_id] = _RunView(
                p=float(max(1, obs.batch_size) * max(1, obs.group_size)), busy_frac=min(1.0, busy),
                tokens_per_s=max(0.0, float(obs.total_tokens)) / obs.step_time_s, last_round=self.round)
        self.reports[obs.run_id] = self.reports.get(obs.run_id, 0) + 1
        changed = False
        if self._round_complete():
            changed = self._close_round()
        return self.decision(changed)

    def _active(self) -> dict[str, _RunView]:
        return {r: v for r, v in self.runs.items() if self.round - v.last_round < self.stale_rounds}

    def _round_complete(self) -> bool:
        active = self._active()
        if not active:
            return False
        if all(r in self.reports for r in active):
            return True
        return max(self.reports.values()) >= self.max_reports_per_round

    def _close_round(self) -> bool:
        active = self._active()
        n_items = sum(v.p * v.busy_frac for v in active.values())
        x = sum(v.tokens_per_s for v in active.values())
        joined_or_left, self.members = frozenset(active) != self.members, frozenset(active)
        if not self.discard_next and not joined_or_left and x > EPS:
            self.window.add(n_items, x)
            self.items_per_slot = n_items / max(1, min(self.capacity, len(active)))
            fit = self.window.fit()
            if fit is not None:
                self.sigma, self.kappa, self.lam, self.p_star = fit.sigma, fit.kappa, fit.lam, fit.p_star
            if self.warming:
                self._sweep_step(x, len(active))
        self.round += 1
        self.warming = self.warming and self.round < self.warmup_rounds
        self._update_ceiling()
        new_cap = self._target(active)
        changed = new_cap != self.capacity
        self.capacity = new_cap
        self.discard_next = changed
        self.reports = {}
        return changed

    def _update_ceiling(self) -> None:
        if self.errors_in_round > 0:
            self.ceiling = max(self.min_capacity, math.floor(self.capacity * self.error_cut))
        elif self.ceiling < self.max_capacity:
            self.ceiling += 1
        self.errors_in_round = 0

    def sweep(self, n_active: int) -> list[int]:
        """Warmup ladder: 1, 2, 4, ... (from min_capacity) up to min(n_active, max_capacity), appended."""
        top = max(self.min_capacity, min(self.max_capacity, n_active))
        caps, c = [], self.min_capacity
        while c < top:
            caps.append(c)
            c *= 2
        caps.append(top)
        return caps

    def _sweep_step(self, x: float, n_active: int) -> None:
        """A fitted warmup round: record its X, move to the next rung; stop at the top or past the peak."""
        self.sweep_x.append(x)
        retrograde = len(self.sweep_x) >= 3 and x < (1.0 - self.sweep_drop) * max(self.sweep_x)
        if retrograde or len(self.sweep_x) >= len(self.sweep(n_active)):
            self.warming = False

    def _target(self, active: dict[str, _RunView]) -> int:
        if self.warming:
            ladder = self.sweep(len(active))
            return min(self.ceiling, ladder[min(len(self.sweep_x), len(ladder) - 1)])
        if self.kappa <= EPS or self.window.n_valid < 3:
            target = len(active)  # the highest capacity measured without retrograde: no more is known safe
        else:
            per_slot = self.items_per_slot or sum(v.p for v in active.values()) / max(1, len(active))
            target = round(self.p_star * self.throttle_margin / per_slot)
        return max(self.min_capacity, min(self.max_capacity, self.ceiling, int(target)))

    def decision(self, changed: bool = False) -> PooledDecision:
        return PooledDecision(
            resource=self.resource, rounds=self.round, p_star=self.p_star, sigma=self.sigma,
            kappa=self.kappa, lam=self.lam, capacity=self.capacity,
            warmup=self.warming, changed=changed)

    def state_dict(self) -> dict[str, Any]:
        return {
            "window": self.window.state_dict(), "round": self.round, "capacity": self.capacity,
            "ceiling": self.ceiling, "items_per_slot": self.items_per_slot,
            "fit": [self.sigma, self.kappa, self.lam, self.p_star],
            "warming": self.warming, "sweep_x": list(self.sweep_x),
        }

    def load_state_dict(self, d: dict[str, Any]) -> None:
        self.window.load_state_dict(d["window"])
        self.round, self.capacity, self.ceiling = int(d["round"]), int(d["capacity"]), int(d["ceiling"])
        self.items_per_slot = float(d["items_per_slot"])
        self.sigma, self.kappa, self.lam, self.p_star = (float(v) for v in d["fit"])
        self.warming = bool(d.get("warming", self.round < self.warmup_rounds))  # older states: by round
        self.sweep_x = [float(v) for v in d.get("sweep_x", [])]
