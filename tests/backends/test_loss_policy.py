"""Local policy loss (spec 3.1, 12.1 test_ratio_clipping / test_local_policy_loss) and aggregation."""

from __future__ import annotations

import math

import pytest
import torch

from retrain_ray.algorithms.loss import aggregate_microbatches, policy_loss

approx = pytest.approx


def _loss(ratios, advs, mask=None, **kw):
    new = torch.log(torch.tensor([ratios], dtype=torch.float64))
    old = torch.zeros_like(new)
    adv = torch.tensor([advs], dtype=torch.float64)
    m = torch.ones_like(new) if mask is None else torch.tensor([mask], dtype=torch.float64)
    out = policy_loss(new, old, adv, m, **kw)
    metrics = aggregate_microbatches([out])
    return metrics["loss"], metrics


def test_unclipped_loss_is_token_mean_of_minus_ratio_adv():
    loss, m = _loss([1.5, 0.5, 1.0], [1.0, -2.0, 0.5])
    assert loss == approx((-1.5 + 1.0 - 0.5) / 3)
    assert m["clip_fraction"] == 0.0


def test_ppo_clip_exact_values():
    loss, m = _loss([1.5, 0.5, 1.0], [1.0, 1.0, 1.0], clip_eps=0.2)
    assert loss == approx(-0.9) and m["clip_fraction"] == approx(2 / 3)
    loss, m = _loss([1.3, 0.7, 1.0], [1.0, 1.0, 1.0], clip_eps=0.2, clip_eps_high=0.28)
    assert loss == approx(-(1.28 + 0.7 + 1.0) / 3) and m["clip_fraction"] == approx(2 / 3)
    _, m = _loss([0.7, 0.9, 1.0, 1.1, 1.3], [1.0] * 5, clip_eps=0.2)
    assert m["clip_fraction"] == approx(0.4)
    _, m = _loss([0.5, 1.0, 1.5, 1.0], [1.0] * 4, mask=[1, 1, 0, 0], clip_eps=0.2)
    assert m["clip_fraction"] == approx(0.5)
    loss, _ = _loss([1.5], [-1.0], clip_eps=0.2)
    assert loss == approx(1.5)


def test_zero_advantage_tokens_are_not_action_tokens():
    loss, m = _loss([2.0, 1.0, 3.0], [0.0, 1.0, 0.0])
    assert m["num_action_tokens"] == 1.0 and loss == approx(-1.0)
    empty, m = _loss([2.0], [0.0])
    assert empty == 0.0 and m["num_action_tokens"] == 0.0


def test_kl_cov_exact_values():
    new = [-5.0, -1.0, -0.1, -0.2]
    ratios = [math.exp(x) for x in new]
    advs = [1.0, 2.0, 3.0, 4.0]
    standard, _ = _loss(ratios, advs)
    loss, m = _loss(ratios, advs, mode="kl_cov", kl_cov_percent=25.0)
    assert m["policy/cov_fraction"] == approx(0.25)
    assert loss == approx(standard + 5.0 / 4)
    assert m["policy/abs_kl"] == approx(sum(abs(x) for x in new) / 4)


def test_clip_cov_zeroes_eligible_tokens():
    # centred cov (A - 2.5)(new - mean new): token 0 -> 5.1375 (> max), token 3 -> 2.0625 (eligible),
    # token 2 -> 0.7375 (< min), token 1 negative.
    new = [-5.0, -1.0, -0.1, -0.2]
    ratios = [math.exp(x) for x in new]
    advs = [1.0, 2.0, 3.0, 4.0]
    loss, m = _loss(ratios, advs, mode="clip_cov", clip_cov_ratio=1.0, generator=torch.Generator().manual_seed(0))
    expected = -(ratios[0] * 1.0 + ratios[1] * 2.0 + ratios[2] * 3.0) / 4  # eps 1: clip(r, 0, 2) = r here
    assert m["policy/cov_fraction"] == approx(0.25)
    assert loss == approx(expected)


def test_dual_clip_bounds_negative_advantage_loss():
    loss, _ = _loss([5.0], [-1.0], clip_eps=0.2, clip_ratio_c=3.0)
    assert loss == approx(3.0)
    loss, _ = _loss([5.0], [1.0], clip_eps=0.2, clip_ratio_c=3.0)
    assert loss == approx(-1.2)
    with pytest.raises(ValueError, match="clip_ratio_c"):
        _loss([1.0], [1.0], clip_ratio_c=0.5)
    with pytest.raises(ValueError, match="policy_loss_mode"):
        _loss([1.0], [1.0], mode="ppo2")


def _random_batch(seed: int, batch: int = 6, time: int = 7):
    g = torch.Generator().manual_seed(seed)
    new = (torch.randn(batch, time, generator=g, dtype=torch.float64) * 0.3 - 1.0).requires_grad_(True)
    old = new.detach() + torch.randn(batch, time, generator=g, dtype=torch.float64) * 0.2
    adv = torch.randn(batch, time, generator=g, dtype=torch.float64)
    adv[torch.rand(batch, time, generator=g) < 0.3] = 0.0
    mask = (torch.rand(batch, time, generator=g) < 0.8).to(torch.float64)
    return new, old, adv, mask


@pytest.mark.parametrize("kw", [{}, {"clip_eps": 0.2, "clip_eps_high": 0.28}, {"clip_eps": 0.1, "clip_ratio_c": 3.0}])
def test_microbatch_aggregation_equals_whole_batch_token_mean(kw):
    new, old, adv, mask = _random_batch(0)
    whole = policy_loss(new, old, adv, mask, **kw)
    (whole.loss_sum / whole.num_action_tokens).backward()
    grad_whole = new.grad.clone()
    new.grad = None
    parts = [policy_loss(new[s], old[s], adv[s], mask[s], **kw) for s in (slice(0, 1), slice(1, 4), slice(4, 6))]
    total = sum(p.num_action_tokens for p in parts)
    for p in parts:
        (p.loss_sum / total).backward()
    assert torch.allclose(new.grad, grad_whole, atol=1e-12)
    agg, ref = aggregate_microbatches(parts), aggregate_microbatches([whole])
    for key in ("loss", "clip_fraction", "policy/abs_kl", "num_action_tokens"):
        assert agg[key] == approx(ref[key], abs=1e-12)
    assert ref["loss"] == approx(float(whole.loss_sum.detach()) / float(((mask > 0) & (adv != 0)).sum()))


def test_standard_loss_gradient():
    new, old, adv, mask = _random_batch(1, batch=3, time=4)
    action = ((mask > 0) & (adv != 0)).to(torch.float64)

    def fn(x):
        return policy_loss(x, old, adv, mask).loss_sum

    assert torch.autograd.gradcheck(fn, (new,), eps=1e-6, atol=1e-6)
    out = policy_loss(new, old, adv, mask)
    out.loss_sum.backward()
    analytic = -torch.exp(new.detach() - old) * adv * action
    assert torch.allclose(new.grad, analytic, atol=1e-12)


def test_clipped_tokens_get_no_gradient():
    new = torch.log(torch.tensor([[1.5, 1.0]], dtype=torch.float64)).requires_grad_(True)
    out = policy_loss(new, torch.zeros_like(new), torch.ones_like(new), torch.ones_like(new), clip_eps=0.2)
    out.loss_sum.backward()
    assert new.grad[0, 0].item() == 0.0 and new.grad[0, 1].item() == approx(-1.0)
