"""The pooled controller in a closed loop on simulated time: runs -> FIFO throttle -> shared endpoint
with a known USL curve -> controller -> throttle capacity. Deterministic, so the assertions on its
decisions hold on a loaded machine (the Ray closed loop in test_backpressure_actor.py checks only the
wiring)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from simulated_time import SimulatedLoop

from retrain_ray.backpressure.pooled import PooledController
from retrain_ray.backpressure.usl import usl_optimal_p

SIGMA, KAPPA, LAM = 0.02, 0.002, 20.0  # p* = sqrt(0.98 / 0.002) = 22.1 items


@dataclass
class FixedCapacity:
    """A throttle left at one capacity: the baseline the controller is measured against."""

    capacity: int

    def observe(self, obs) -> None:
        return None


def _items_per_s(loop: SimulatedLoop, since: float) -> float:
    late = [t for t, _, _ in loop.steps if t > since]
    return len(late) * loop.items / (loop.now - since)


def _loop(controller, runs: int, items: int, seconds: float = 120.0) -> SimulatedLoop:
    loop = SimulatedLoop(controller, runs=runs, items=items, sigma=SIGMA, kappa=KAPPA, lam=LAM)
    loop.run_until(seconds)
    return loop


def test_three_runs_of_16_items_settle_at_one_or_two_slots():
    """N* = 22 items: X(16) and X(32) are within 1%, no limit (48 items) is 17% worse."""
    ctl = PooledController("ep", max_capacity=3, warmup_rounds=6)
    loop = _loop(ctl, runs=3, items=16)
    late = [cap for t, _, cap in loop.steps if t > 30.0]
    assert not ctl.warming
    assert sum(cap in (1, 2) for cap in late) >= 0.95 * len(late)
    assert ctl.p_star == pytest.approx(usl_optimal_p(SIGMA, KAPPA), rel=0.25)


@pytest.mark.parametrize("runs", [4, 8])
def test_pooled_throughput_matches_the_best_fixed_capacity(runs):
    best_fixed = max(_items_per_s(_loop(FixedCapacity(c), runs, 8), 30.0) for c in range(1, runs + 1))
    unthrottled = _items_per_s(_loop(FixedCapacity(runs), runs, 8), 30.0)
    pooled = _items_per_s(_loop(PooledController("ep", max_capacity=runs, warmup_rounds=8), runs, 8), 30.0)
    assert pooled >= 0.95 * best_fixed
    if runs == 8:
        assert pooled >= 1.5 * unthrottled  # 64 items in flight is far past N* = 22


def test_simulated_loop_is_deterministic():
    first = _loop(PooledController("ep", max_capacity=4), 4, 8, seconds=40.0)
    second = _loop(PooledController("ep", max_capacity=4), 4, 8, seconds=40.0)
    assert first.steps == second.steps and len(first.steps) > 100
