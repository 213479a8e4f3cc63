"""The batched update (shared_trainer/update.py) leaves every member exactly where `apply_update` leaves it
alone: the same weights and AdamW moments bit for bit, the same grad and weight norms, and a member with a
non-finite gradient fails alone."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from retrain_ray.backends.local import LoraSettings, OptimizerSettings, PolicySettings
from retrain_ray.backends.local.backend import apply_update
from retrain_ray.shared_trainer.adapters import RunAdapter, new_adapter
from retrain_ray.shared_trainer.update import UpdateOrder, apply_updates
from retrain_ray.util.finite import NonFiniteError

KEYS = ["q", "v"]


def _members() -> list[tuple[PolicySettings, float, float]]:
    """(settings, lr, weight decay): ranks, clipping on and off, other betas, decay on and off."""
    return [
        (PolicySettings(lora=LoraSettings(rank=4), seed=1), 1e-2, 0.0),
        (PolicySettings(lora=LoraSettings(rank=8), seed=2, optimizer=OptimizerSettings(grad_clip_norm=0.05)), 3e-3, 0.1),
        (PolicySettings(lora=LoraSettings(rank=2, freeze_a=True), seed=3,
                        optimizer=OptimizerSettings(beta1=0.8, beta2=0.99, eps=1e-6, grad_clip_norm=10.0)), 2e-2, 0.01),
    ]


def _adapter(name: str, settings: PolicySettings) -> RunAdapter:
    torch.manual_seed(0)
    bases = {key: nn.Linear(16, 12, bias=False) for key in KEYS}
    return new_adapter(name, settings, bases, KEYS, torch.device("cpu"))


def _fill_grads(adapter: RunAdapter, step: int, index: int) -> None:
    generator = torch.Generator().manual_seed(100 * step + index)
    for p in adapter.params:
        p.grad = torch.randn(p.shape, generator=generator) * (index + 1)


def _tensors(adapter: RunAdapter) -> list[torch.Tensor]:
    state = adapter.optimizer.state_dict()["state"]
    return [p.detach() for p in adapter.params] + [s[k] for s in state.values() for k in ("exp_avg", "exp_avg_sq", "step")]


def test_every_member_updates_bit_for_bit_as_alone() -> None:
    members = _members()
    together = [_adapter(f"r{i}", s) for i, (s, _, _) in enumerate(members)]
    alone = [_adapter(f"r{i}", s) for i, (s, _, _) in enumerate(members)]
    for step in range(4):
        for i, (mine, theirs) in enumerate(zip(together, alone, strict=True)):
            _fill_grads(mine, step, i)
            _fill_grads(theirs, step, i)
        updates = apply_updates([UpdateOrder(a, lr, wd) for a, (_, lr, wd) in zip(together, members, strict=True)])
        for adapter, (settings, lr, wd), update in zip(alone, members, updates, strict=True):
            expected = apply_update(adapter.params, adapter.optimizer, grad_clip_norm=settings.optimizer.grad_clip_norm,
                                    lr=lr, weight_decay=wd, update_number=step + 1)
            assert update == expected
        for mine, theirs in zip(together, alone, strict=True):
            assert all(torch.equal(a, b) for a, b in zip(_tensors(mine), _tensors(theirs), strict=True))
            group = mine.optimizer.state_dict()["param_groups"]
            assert group == theirs.optimizer.state_dict()["param_groups"]
    assert together[1].optimizer.param_groups[0]["lr"] == 3e-3


def test_a_non_finite_gradient_fails_its_member_alone() -> None:
    members = _members()
    adapters = [_adapter(f"r{i}", s) for i, (s, _, _) in enumerate(members)]
    before = [[p.detach().clone() for p in a.params] for a in adapters]
    for i, adapter in enumerate(adapters):
        _fill_grads(adapter, 0, i)
    adapters[1].params[0].grad[0, 0] = math.nan
    updates = apply_updates([UpdateOrder(a, lr, wd) for a, (_, lr, wd) in zip(adapters, members, strict=True)])
    assert isinstance(updates[1], NonFiniteError) and "gradient norm is nan at update 1" in str(updates[1])
    assert all(p.grad is None for p in adapters[1].params)
    assert all(torch.equal(p, q) for p, q in zip(adapters[1].params, before[1], strict=True))
    for i in (0, 2):
        assert isinstance(updates[i], dict) and updates[i]["grad_norm"] > 0
        assert not any(torch.equal(p, q) for p, q in zip(adapters[i].params, before[i], strict=True))


@pytest.mark.parametrize("clip", [0.0, 1.0])
def test_a_member_without_gradients_keeps_its_weights(clip: float) -> None:
    settings = PolicySettings(optimizer=OptimizerSettings(grad_clip_norm=clip))
    adapter = _adapter("r", settings)
    weights = [p.detach().clone() for p in adapter.params]
    (update,) = apply_updates([UpdateOrder(adapter, 1e-2, 0.0)])
    assert isinstance(update, dict) and update["grad_norm"] == 0.0 and update["weight_norm_growth"] == 1.0
    assert all(torch.equal(p, q) for p, q in zip(adapter.params, weights, strict=True))
