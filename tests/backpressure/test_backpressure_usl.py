"""USL controller: the original's numeric cases (spec 12.1), fit properties, checkpoint round trip."""

from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from retrain_ray.backpressure.advisor import LocalAdvisor, warmup_batch_sizes
from retrain_ray.backpressure.types import NoOpAdvisor, StepObservation
from retrain_ray.backpressure.usl import USLController, usl_capacity, usl_optimal_p


def _feed(ctl: USLController, p: float, sigma: float, kappa: float, lam: float = 100.0,
          scale: float = 1.0) -> None:
    """One observation at concurrency p (group size 1) with throughput scale * X(p)."""
    ctl.observe(1.0, int(p), 1, scale * lam * usl_capacity(p, sigma, kappa))


def test_capacity_and_optimal_p_cases():
    for s, k in [(0.0, 0.0), (0.3, 0.01), (0.9, 0.5)]:
        assert usl_capacity(1, s, k) == pytest.approx(1.0)
    assert usl_capacity(17, 0.0, 0.0) == pytest.approx(17.0)
    assert usl_capacity(10, 0.1, 0.0) == pytest.approx(10 / 1.9)
    assert usl_capacity(20, 0.05, 0.001) == pytest.approx(20 / 2.33)
    assert usl_optimal_p(0.05, 0.001) == pytest.approx(math.sqrt(950))
    assert usl_optimal_p(0.1, 0.01) == pytest.approx(math.sqrt(90))
    assert usl_optimal_p(0.1, 0.0) == 1.0
    assert usl_optimal_p(1.0, 0.01) == 1.0
    assert usl_capacity(10, -1.0, 0.0) == 0.0  # denominator <= 0


def test_exact_recovery_noise_free():
    ctl = USLController(warmup_steps=0)
    for p in (2, 7, 19, 40):
        _feed(ctl, p, 0.08, 0.003, lam=500.0)
    assert ctl.sigma == pytest.approx(0.08, abs=1e-9)
    assert ctl.kappa == pytest.approx(0.003, abs=1e-11)
    assert ctl.lam == pytest.approx(500.0, rel=1e-9)
    assert ctl.p_star == pytest.approx(math.sqrt(0.92 / 0.003), rel=1e-9)


def test_recovery_with_half_percent_noise():
    rng = np.random.default_rng(42)
    ctl = USLController(warmup_steps=0, max_batch_size=64)
    for p in (2, 4, 6, 8, 10, 14, 18, 22, 26, 30, 35, 40, 50):
        x = 500.0 * usl_capacity(p, 0.08, 0.003) * (1.0 + 0.005 * rng.standard_normal())
        ctl.observe(1.0, p, 1, x)
    assert abs(ctl.sigma - 0.08) <= 0.02
    assert abs(ctl.kappa - 0.003) <= 0.001
    assert abs(ctl.lam - 500.0) <= 50
    assert abs(ctl.p_star - usl_optimal_p(0.08, 0.003)) <= 2


@settings(max_examples=40, deadline=None)
@given(st.floats(0.0, 0.6), st.floats(1e-4, 2e-2), st.floats(1.0, 1e4))
def test_noise_free_recovery_property(sigma, kappa, lam):
    ctl = USLController(warmup_steps=0)
    for p in (1, 3, 6, 11, 20):
        _feed(ctl, p, sigma, kappa, lam)
    assert ctl.sigma == pytest.approx(sigma, abs=1e-6)
    assert ctl.kappa == pytest.approx(kappa, rel=1e-5, abs=1e-9)
    assert ctl.lam == pytest.approx(lam, rel=1e-6)
    # p* maximises X on a fine grid around it
    grid = np.linspace(1.0, 4 * ctl.p_star, 400)
    best = grid[np.argmax([usl_capacity(g, sigma, kappa) for g in grid])]
    assert abs(best - ctl.p_star) <= 4 * ctl.p_star / 399 + 1e-9


def test_incremental_sums_match_rescan_after_evictions():
    rnd = random.Random(7)
    ctl = USLController(warmup_steps=0)
    for _ in range(150):
        ctl.observe(rnd.uniform(0.05, 3.0), rnd.randint(1, 64), rnd.randint(1, 8), rnd.uniform(10, 5000))
    assert len(ctl.window.points) == 100
    for inc, full in zip(ctl.window.sums, ctl.window.rescan(), strict=True):
        assert abs(inc - full) <= 1e-10 * max(abs(full), 1e-300)


def test_ema_cases():
    ctl = USLController(warmup_steps=0, ema_decay=0.9)
    ctl.observe(1.0, 4, 1, 1000)
    assert ctl.ema == 1000
    ctl.observe(1.0, 4, 1, 5000, skipped=True)
    assert ctl.ema == 1000 and ctl.step_count == 2
    ctl.observe(1.0, 4, 1, 2000)
    assert ctl.ema == pytest.approx(1100)


def test_bad_observation_values_count_as_zero_throughput():
    ctl = USLController(warmup_steps=0)
    ctl.observe(float("nan"), 4, 1, 100)
    ctl.observe(-1.0, 4, 1, 100)
    ctl.observe(1.0, "x", 1, -5)
    assert ctl.window.n_valid == 0 and ctl.ema == 0.0
    assert ctl.window.points[-1][0] == 1.0  # unparsable batch size falls back to 1


def test_retrograde_throttle_case():
    ctl = USLController(warmup_steps=3, ema_decay=0.0)
    for p in (4, 8, 12):
        _feed(ctl, p, 0.05, 0.005)
        assert ctl.recommend().action == "hold" and ctl.regime == "warmup"
    _feed(ctl, 50, 0.05, 0.005)
    d = ctl.recommend()
    assert (d.regime, d.action) == ("retrograde", "throttle")
    assert d.recommended_batch_size == max(1, min(64, int(0.85 * usl_optimal_p(0.05, 0.005))))


@pytest.mark.parametrize("scale,regime,action", [(1.0, "optimal", "increase"), (1.5, "memory_bound", "increase"),
                                                 (0.5, "retrograde", "throttle")])
def test_ratio_regimes(scale, regime, action):
    # p* ~ 43.6 (refitted with the 4th point): only the retrograde regime throttles
    ctl = USLController(warmup_steps=3, ema_decay=0.0)
    for p in (4, 8, 15):
        _feed(ctl, p, 0.05, 0.0005)
    ctl.observe(1.0, 10, 1, scale * 100.0 * usl_capacity(10, 0.05, 0.0005))
    d = ctl.recommend()
    assert d.regime == regime
    assert (d.action == "throttle") == (action == "throttle")


def test_increase_case():
    ctl = USLController(warmup_steps=3, ema_decay=0.0)
    for p in (4, 8, 12, 2):
        _feed(ctl, p, 0.05, 0.002)
    d = ctl.recommend()
    assert d.action == "increase"
    assert abs(d.recommended_batch_size - int(0.85 * usl_optimal_p(0.05, 0.002))) <= 1
    assert d.recommended_group_size == 1


def test_utilization_near_one_at_p_star():
    ctl = USLController(warmup_steps=0, ema_decay=0.0)
    for p in (2, 6, 12, 30):
        _feed(ctl, p, 0.05, 0.002)
    _feed(ctl, round(usl_optimal_p(0.05, 0.002)), 0.05, 0.002)
    assert ctl.recommend().utilization == pytest.approx(1.0, abs=0.15)


def test_roofline_hint_uses_consistent_units():
    # lambda*C(p) = 100*C(10) tokens/s; 1e9 FLOP/token -> ~5.8e11 FLOP/s vs a 500 GFLOP/s peak.
    ctl = USLController(warmup_steps=0, peak_gflops=500.0, peak_bw_gb_s=1.0, flops_per_token=1e9)
    for p in (4, 8, 15, 10):
        _feed(ctl, p, 0.05, 0.0005)
    assert ctl.regime == "compute_bound"
    ctl.flops_per_token = 1e6
    _feed(ctl, 10, 0.05, 0.0005)
    assert ctl.regime == "memory_bound"


def test_peak_gflops_turns_the_roofline_on_with_the_models_flops_per_token():
    """builtin:tiny: 6·N FLOP/token with N its real parameter count; lambda·C(10) ~ 580 tokens/s, so about
    1.19e9 FLOP/s: compute_bound against a 1 GFLOP/s roof (ratio ~1.19 > 0.7), memory_bound against 10."""
    from transformers import AutoModelForCausalLM

    from retrain_ray.backpressure.settings import BackPressureSettings
    from retrain_ray.config import RetrainConfig
    from retrain_ray.models.loading import resolve_model_path

    n = sum(p.numel() for p in AutoModelForCausalLM.from_pretrained(resolve_model_path("builtin:tiny")).parameters())

    def cfg(**bp):
        return RetrainConfig.model_validate({"model": {"model": "builtin:tiny"}, "backpressure": {"warmup_steps": 0, **bp}})

    off = cfg()
    assert USLController.from_config(off.backpressure, off.model, off.backend).flops_per_token == 0.0  # hint off by default
    on = cfg(peak_gflops=1.0)
    assert BackPressureSettings.from_config(on.backpressure, on.model, on.backend).controller().flops_per_token == 6.0 * n
    regimes = []
    for peak in (1.0, 10.0):
        on = cfg(peak_gflops=peak)
        ctl = USLController.from_config(on.backpressure, on.model, on.backend)
        assert ctl.flops_per_token == 6.0 * n
        for p in (4, 8, 15, 10):
            _feed(ctl, p, 0.05, 0.0005)
        regimes.append(ctl.regime)
    assert regimes == ["compute_bound", "memory_bound"]


@pytest.mark.parametrize("kwargs", [
    {"warmup_steps": -1}, {"ema_decay": 1.5}, {"ema_decay": -0.1}, {"throttle_margin": 0.0},
    {"throttle_margin": 1.2}, {"increase_margin": 0.0}, {"min_batch_size": 0},
    {"min_batch_size": 8, "max_batch_size": 4}, {"min_group_size": 0},
    {"min_group_size": 4, "max_group_size": 2}, {"window": 2},
])
def test_invalid_parameters_raise(kwargs):
    with pytest.raises(ValueError, match="backpressure"):
        USLController(**kwargs)


def test_state_dict_round_trip_mid_stream():
    rnd = random.Random(3)
    obs = [(rnd.uniform(0.1, 2.0), rnd.randint(1, 32), rnd.choice([2, 4]), rnd.uniform(100, 9000),
            rnd.random() < 0.1) for _ in range(260)]
    a = USLController(warmup_steps=5)
    for o in obs[:130]:
        a.observe(*o)
    b = USLController(warmup_steps=5)
    b.load_state_dict(json.loads(json.dumps(a.state_dict())))
    for o in obs[130:]:
        a.observe(*o)
        b.observe(*o)
        assert a.recommend() == b.recommend()
    with pytest.raises(ValueError, match="version"):
        b.load_state_dict({"version": 99})


def test_warmup_sweep_sequence_applied_by_local_advisor():
    assert warmup_batch_sizes(1, 64) == [1, 2, 4, 8, 16, 32, 64]
    assert warmup_batch_sizes(3, 20) == [3, 6, 12, 20]
    adv = LocalAdvisor(USLController(warmup_steps=10), enabled=True, min_bs=1, max_bs=64)
    bs, used = adv.initial_batch_size(8), []
    for step in range(10):
        used.append(bs)
        tokens = 100.0 * usl_capacity(bs * 2, 0.05, 0.002)
        bs = adv.advise(StepObservation("r", step, bs, 2, tokens, 1.0)).recommended_batch_size
    assert used == [1, 2, 4, 8, 16, 32, 64, 1, 2, 4]
    # after warmup the fit drives the batch size, clamped to the bounds
    d = adv.advise(StepObservation("r", 10, 64, 2, 100.0 * usl_capacity(128, 0.05, 0.002), 1.0))
    assert d.action == "throttle"
    assert d.recommended_batch_size == int(0.85 * usl_optimal_p(0.05, 0.002) / 2)


def test_disabled_and_skipped_decisions_are_not_applied():
    adv = LocalAdvisor(USLController(warmup_steps=0), enabled=False, min_bs=1, max_bs=64)
    for step, p in enumerate((4, 8, 12, 60)):
        d = adv.advise(StepObservation("r", step, p, 1, 100.0 * usl_capacity(p, 0.05, 0.005), 1.0))
    assert d.action == "throttle" and d.recommended_batch_size == 60
    adv.enabled = True
    d = adv.advise(StepObservation("r", 4, 60, 1, 0, 1.0, skipped=True))
    assert d.recommended_batch_size == 60
    assert NoOpAdvisor().advise(StepObservation("r", 0, 5, 3, 10, 1.0)).to_metrics()["bp_p_star"] == 1.0


def test_labels_before_the_first_fit_say_no_model():
    """docs/backpressure.md: with every step at p = 16 the fit is singular (det = 0 exactly), so no model
    exists; the original would label these steps memory_bound (1000 / 16 = 62.5 > 1.1) with utilization
    1000 from its placeholder lambda 1.0. Here: optimal, utilization 1.0, hold, lambda 0."""
    ctl = USLController(warmup_steps=0)
    for _ in range(5):
        ctl.observe(step_time_s=1.0, batch_size=2, group_size=8, total_tokens=1000)
        d = ctl.recommend()
        assert (d.regime, d.action, d.utilization, d.lam) == ("optimal", "hold", 1.0, 0.0)
        assert (d.sigma, d.kappa, d.p_star, d.throughput) == (0.0, 0.0, 1.0, 1000.0)
    ctl.observe(step_time_s=1.0, batch_size=4, group_size=8, total_tokens=1900)
    assert ctl.recommend().lam == 0.0  # two distinct p cannot fix three parameters
    ctl.observe(step_time_s=1.0, batch_size=6, group_size=8, total_tokens=2600)  # a third p: now it fits
    assert ctl.recommend().lam > 0.0



def test_settings_take_every_section_key_and_its_default_from_the_section():
    from retrain_ray.backpressure.settings import BackPressureSettings
    from retrain_ray.config.schema import RetrainConfig
    from retrain_ray.config.sections_runtime import BackpressureSection

    defaults = BackPressureSettings()
    assert {k: getattr(defaults, k) for k in BackpressureSection.model_fields} == BackpressureSection().model_dump()
    cfg = RetrainConfig.model_validate({"model": {"model": "builtin:tiny"},
                                        "backpressure": {"warmup_steps": 3, "error_cut": 0.25}})
    changed = BackPressureSettings.from_config(cfg.backpressure, cfg.model, cfg.backend, max_capacity=5)
    assert (changed.warmup_steps, changed.error_cut, changed.max_capacity) == (3, 0.25, 5)
