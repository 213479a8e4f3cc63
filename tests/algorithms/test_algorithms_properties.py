"""Hypothesis property tests of the advantage pipeline (spec 12.1 test_credit_invariants and more)."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from retrain_ray.algorithms import (
    batch_normalize,
    cap_advantages,
    compute_group_advantages,
    grpo,
    gtpo_weighting,
    hicra,
    sepa_amp,
    sepa_amp_c,
    sepa_pool,
)

settings.register_profile("algorithms", max_examples=60, deadline=None)
settings.load_profile("algorithms")

rewards_st = st.lists(st.floats(-10, 10, allow_nan=False), min_size=1, max_size=12)
surprisal_st = st.lists(st.floats(0, 60, allow_nan=False), min_size=1, max_size=30)
adv_st = st.floats(-5, 5, allow_nan=False)
mask_for = st.lists(st.integers(0, 1), min_size=1, max_size=30)


@given(rewards_st)
def test_grpo_sums_to_zero(rewards):
    assert abs(sum(grpo(rewards))) <= 1e-9 * max(1.0, max(abs(r) for r in rewards)) * len(rewards)


@given(adv_st, surprisal_st, st.floats(0, 0.99))
def test_gtpo_preserves_token_mean_and_sign(advantage, h, beta):
    out = gtpo_weighting(advantage, h, beta)
    capped = [min(x, 50.0) for x in h]
    mu = sum(capped) / len(capped)
    if mu < 1e-7:
        assert out == [advantage] * len(h)
        return
    # the 1e-8 guard in the denominator shifts the mean by at most beta * 1e-8 / mu (relative)
    tolerance = abs(advantage) * beta * 1e-8 / mu + 1e-12
    assert abs(sum(out) / len(out) - advantage) <= tolerance + 1e-9 * abs(advantage)
    assert all(t * advantage >= 0 for t in out)
    if advantage > 0:  # monotone in surprisal
        pairs = sorted(zip(capped, out, strict=True))
        assert all(a[1] <= b[1] + 1e-12 for a, b in zip(pairs, pairs[1:], strict=False))


@given(st.data())
def test_hicra_never_flips_sign(data):
    mask = data.draw(mask_for)
    advs = data.draw(st.lists(adv_st, min_size=len(mask), max_size=len(mask)))
    alpha = data.draw(st.floats(0, 1))
    out = hicra(advs, mask, alpha)
    assert all(o * a >= 0 or o == 0.0 for o, a in zip(out, advs, strict=True))
    assert all(o == a for o, a, m in zip(out, advs, mask, strict=True) if not m)


@given(st.data())
def test_sepa_with_lambda_zero_is_identity(data):
    mask = data.draw(mask_for)
    h = data.draw(st.lists(st.floats(0, 60, allow_nan=False), min_size=len(mask), max_size=len(mask)))
    for fn in (sepa_pool, sepa_amp, sepa_amp_c):
        assert fn(h, mask, 0.0) == h


@given(st.data())
def test_sepa_pool_keeps_planning_tokens_and_exec_mean(data):
    mask = data.draw(mask_for)
    h = data.draw(st.lists(st.floats(0, 50, allow_nan=False), min_size=len(mask), max_size=len(mask)))
    lam = data.draw(st.floats(0, 1))
    out = sepa_pool(h, mask, lam)
    assert all(o == x for o, x, m in zip(out, h, mask, strict=True) if m)
    exec_in = [x for x, m in zip(h, mask, strict=True) if not m]
    exec_out = [x for x, m in zip(out, mask, strict=True) if not m]
    if exec_in:
        assert math.isclose(sum(exec_out), sum(exec_in), rel_tol=1e-9, abs_tol=1e-9)


advs_D_st = st.lists(
    st.lists(st.one_of(st.just(0.0), st.floats(-100, 100, allow_nan=False)), min_size=1, max_size=8),
    min_size=1, max_size=6,
)


@given(advs_D_st)
def test_batch_norm_mean0_std1_and_keeps_zeros(advs_D):
    out, _ = batch_normalize(advs_D)
    assert all(o == 0.0 for row_o, row in zip(out, advs_D, strict=True) for o, a in zip(row_o, row, strict=True)
               if a == 0.0)
    values = [a for row in advs_D for a in row if a != 0.0]
    if not values:
        return
    mean = sum(values) / len(values)
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
    normed = [o for row_o, row in zip(out, advs_D, strict=True) for o, a in zip(row_o, row, strict=True) if a != 0.0]
    assert abs(sum(normed) / len(normed)) <= 1e-6
    if std >= 1e-3:
        n_mean = sum(normed) / len(normed)
        n_std = math.sqrt(sum((v - n_mean) ** 2 for v in normed) / len(normed))
        assert abs(n_std - 1.0) <= 1e-6


@given(advs_D_st, st.floats(0.01, 50))
def test_cap_bounds_values(advs_D, cap):
    out, metrics = cap_advantages(advs_D, cap)
    assert all(abs(a) <= cap for row in out for a in row)
    assert 0.0 <= metrics["adv_cap_fraction"] <= 1.0
    assert all(o == a for row_o, row in zip(out, advs_D, strict=True) for o, a in zip(row_o, row, strict=True)
               if abs(a) <= cap)


@given(st.data())
def test_pipeline_gtpo_token_mean_equals_grpo_advantage(data):
    rewards = data.draw(st.lists(st.floats(0, 1, allow_nan=False), min_size=2, max_size=6))
    logprobs = [
        data.draw(st.lists(st.floats(-20, -0.01, allow_nan=False), min_size=1, max_size=10)) for _ in rewards
    ]
    beta = data.draw(st.floats(0, 0.99))
    result = compute_group_advantages(rewards, logprobs, None, advantage_mode="grpo", transform_mode="gtpo",
                                      gtpo_beta=beta)
    for token_advs, a in zip(result.token_advantages, grpo(rewards), strict=True):
        assert len(token_advs) > 0
        assert abs(sum(token_advs) / len(token_advs) - a) <= 1e-6 * max(1.0, abs(a))


def _delight_group(data, min_size=1):
    n = data.draw(st.integers(min_size, 5))
    rewards = data.draw(st.lists(st.floats(-3, 3, allow_nan=False), min_size=n, max_size=n))
    logprobs = [data.draw(st.lists(st.floats(-70, 0, allow_nan=False), min_size=1, max_size=12)) for _ in range(n)]
    return rewards, logprobs


@given(st.data())
def test_delight_gates_keep_sign_and_never_exceed_the_episode_advantage(data):
    rewards, logprobs = _delight_group(data)
    transform = data.draw(st.sampled_from(["delight", "delight_sepa", "hard_delight"]))
    params = {"delight_norm_mode": data.draw(st.sampled_from(["none", "scale", "mad_scale"])),
              "delight_eta_mode": data.draw(st.sampled_from(["fixed", "adaptive"])),
              "delight_eta": data.draw(st.floats(0.01, 10))}
    lam = data.draw(st.floats(0, 1))
    out = compute_group_advantages(rewards, logprobs, None, advantage_mode="grpo", transform_mode=transform,
                                   sepa_lambda=lam, transform_params=params)
    for a, row, lp in zip(grpo(rewards), out.token_advantages, logprobs, strict=True):
        assert len(row) == len(lp)
        assert all(t * a >= 0 and abs(t) <= abs(a) + 1e-12 for t in row)
    if transform != "delight" and lam == 0.0:  # the SEPA blends start as uniform weighting
        assert out.token_advantages == [[a] * len(lp) for a, lp in zip(grpo(rewards), logprobs, strict=True)]


@given(st.data())
def test_hard_delight_keeps_exactly_k_tokens_of_each_signed_completion(data):
    rewards, logprobs = _delight_group(data)
    k_frac = data.draw(st.floats(0.01, 1))
    out = compute_group_advantages(rewards, logprobs, None, advantage_mode="grpo", transform_mode="hard_delight",
                                   sepa_lambda=1.0, transform_params={"delight_k_frac": k_frac})
    for a, row in zip(grpo(rewards), out.token_advantages, strict=True):
        if a == 0.0:
            assert row == [0.0] * len(row)
            continue
        assert sum(t == a for t in row) == max(1, int(len(row) * k_frac))
        assert all(t in (0.0, a) for t in row)


@given(st.data())
def test_adaptive_eta_stays_within_its_bounds(data):
    rewards, logprobs = _delight_group(data, min_size=2)
    eta_min = data.draw(st.floats(0.01, 1))
    eta_max = eta_min + data.draw(st.floats(0, 5))
    params = {"delight_eta_mode": "adaptive", "delight_eta_min": eta_min, "delight_eta_max": eta_max,
              "delight_eta_target_ordering_gap": data.draw(st.floats(0, 1)),
              "delight_eta_prev": data.draw(st.floats(0.01, 10)), "delight_eta_ema_decay": data.draw(st.floats(0, 0.99))}
    metrics = compute_group_advantages(rewards, logprobs, None, advantage_mode="grpo", transform_mode="delight",
                                       transform_params=params).extra_metrics
    if any(a != 0.0 for a in grpo(rewards)):
        assert eta_min <= metrics["dg_eta"] <= eta_max
