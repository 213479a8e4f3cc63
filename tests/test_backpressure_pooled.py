"""Pooled controller stepped event by event on a synthetic shared endpoint with a known USL curve."""

from __future__ import annotations

import pytest

from retrain_ray.backpressure.fit import usl_capacity, usl_optimal_p
from retrain_ray.backpressure.pooled import PooledController
from retrain_ray.backpressure.types import StepObservation

SIGMA, KAPPA, LAM = 0.05, 0.002, 100.0  # items/s; p* = sqrt(0.95/0.002) = 21.8 items


def _round(ctl: PooledController, runs: list[str], p_items: int, step: int, errors: int = 0):
    """Each run reports one step taken under the capacity in force at that moment: capacity c admits
    c runs' requests of p_items at once, so N = c*p_items and each run gets 1/len(runs) of X(N)."""
    for i, r in enumerate(runs):
        c = min(ctl.capacity, len(runs))
        per_run_items_s = LAM * usl_capacity(c * p_items, SIGMA, KAPPA) / len(runs)
        step_time = p_items / per_run_items_s
        ctl.observe(StepObservation(
            r, step, p_items, 1, total_tokens=10 * p_items, step_time_s=step_time,
            sample_time_s=step_time * c / len(runs), endpoint_errors=errors if i == 0 else 0))
    return ctl.decision()


def test_round_closes_when_every_active_run_reported():
    ctl = PooledController("ep")
    ctl.observe(StepObservation("a", 0, 4, 2, 100, 1.0))
    assert ctl.round == 1  # a alone was every active run
    for r in "bca":
        ctl.observe(StepObservation(r, 0, 4, 2, 100, 1.0))
    assert ctl.round == 2  # a, b, c now all active: a's second report completed the round
    for r in "bc":
        ctl.observe(StepObservation(r, 1, 4, 2, 100, 1.0))
        assert ctl.round == 2
    ctl.observe(StepObservation("a", 1, 4, 2, 100, 1.0))
    assert ctl.round == 3


def test_sweep_then_exact_fit_and_capacity_near_p_star():
    ctl = PooledController("ep", max_capacity=16)
    runs = ["a", "b", "c", "d"]
    caps, warm = [], []
    for step in range(14):
        d = _round(ctl, runs, 8, step)
        caps.append(d.capacity)
        warm.append(d.warmup)
    # each rung held until one round at it is fitted: a straddling round, then a fitted one
    assert caps[:8] == [1, 1, 2, 2, 4, 4, 2, 2]
    assert warm[:7] == [True] * 6 + [False]
    assert [p for p, _ in ctl.window.points][:3] == pytest.approx([8, 16, 32])  # capacity 1 is fitted too
    assert d.sigma == pytest.approx(SIGMA, abs=1e-9)
    assert d.kappa == pytest.approx(KAPPA, rel=1e-9)
    assert d.p_star == pytest.approx(usl_optimal_p(SIGMA, KAPPA), rel=1e-9)
    assert d.lam == pytest.approx(LAM * 10, rel=1e-9)  # tokens/s: 10 tokens per item
    assert not d.warmup and d.capacity == round(0.85 * usl_optimal_p(SIGMA, KAPPA) / 8) == 2


def test_sweep_stops_once_retrograde_is_seen():
    """8 runs of 16 items: X(64) is 27% below X(16), so capacity 8 (N = 128) is never tried; with 8
    items, X(32) is only 1.6% below X(16) (< sweep_drop), so the sweep goes on to the top rung."""
    runs = [f"r{i}" for i in range(8)]
    ctl = PooledController("ep", max_capacity=16, sweep_drop=0.05)
    caps = [_round(ctl, runs, 16, step).capacity for step in range(10)]
    assert caps == [1, 1, 2, 2, 4, 4, 1, 1, 1, 1]
    assert not ctl.decision().warmup and len(ctl.sweep_x) == 3
    assert ctl.sweep_x[2] < 0.95 * max(ctl.sweep_x[:2])
    assert ctl.p_star == pytest.approx(usl_optimal_p(SIGMA, KAPPA), rel=1e-9)
    assert ctl.capacity == round(0.85 * usl_optimal_p(SIGMA, KAPPA) / 16) == 1
    flat = PooledController("ep", max_capacity=16, sweep_drop=0.05)
    caps = [_round(flat, runs, 8, step).capacity for step in range(10)]
    assert caps == [1, 1, 2, 2, 4, 4, 8, 8, 2, 2]


def test_warmup_rounds_caps_the_sweep():
    ctl = PooledController("ep", max_capacity=16, warmup_rounds=3)
    caps = [_round(ctl, [f"r{i}" for i in range(8)], 8, step).capacity for step in range(4)]
    assert caps[:2] == [1, 1] and not ctl.decision().warmup and len(ctl.sweep_x) == 1
    assert caps[3] == 8  # kappa not identified from one rung: the active runs (no more is known safe)


def test_error_cut_then_additive_recovery():
    ctl = PooledController("ep", warmup_rounds=0, max_capacity=8, error_cut=0.5)
    runs = ["a", "b", "c", "d", "e", "f", "g", "h"]
    for step in range(3):  # kappa not identified yet with one N: capacity stays at max
        d = _round(ctl, runs, 1, step)
    assert d.capacity == 8
    d = _round(ctl, runs, 1, 3, errors=2)
    assert d.capacity == 4
    seen = [_round(ctl, runs, 1, 4 + k).capacity for k in range(6)]
    assert seen == [5, 6, 7, 8, 8, 8]


def test_dead_run_does_not_stall_rounds_and_goes_stale():
    ctl = PooledController("ep", stale_rounds=2, max_reports_per_round=2)
    ctl.observe(StepObservation("a", 0, 4, 2, 100, 1.0))
    ctl.observe(StepObservation("b", 0, 4, 2, 100, 1.0))
    assert ctl.round == 1
    for step in range(1, 7):  # b died: a alone closes a round every second report
        ctl.observe(StepObservation("a", step, 4, 2, 100, 1.0))
    assert ctl.round >= 3
    assert set(ctl._active()) == {"a"}


def test_skipped_and_zero_time_observations_do_not_enter_the_fit():
    ctl = PooledController("ep")
    ctl.observe(StepObservation("a", 0, 4, 2, 100, 0.0))
    ctl.observe(StepObservation("a", 1, 4, 2, 100, 1.0, skipped=True))
    assert ctl.runs == {} and ctl.window.n_valid == 0


def test_state_round_trip():
    a = PooledController("ep", warmup_rounds=4)
    for step in range(6):
        _round(a, ["x", "y"], 4, step)
    b = PooledController("ep", warmup_rounds=4)
    b.load_state_dict(a.state_dict())
    assert b.decision() == a.decision() and b.sweep_x == a.sweep_x
    c = PooledController("ep")
    c.load_state_dict(PooledController("ep").state_dict())
    assert c.decision().warmup


@pytest.mark.parametrize("kwargs", [{"error_cut": 0.0}, {"error_cut": 1.0}, {"min_capacity": 0},
                                    {"min_capacity": 4, "max_capacity": 2}, {"throttle_margin": 0.0},
                                    {"sweep_drop": 0.0}, {"sweep_drop": 1.0}])
def test_invalid_parameters_raise(kwargs):
    with pytest.raises(ValueError):
        PooledController("ep", **kwargs)
