"""Every member's optimizer update in one batched pass: per-run gradient clipping, AdamW step and weight
norms over all members' LoRA tensors at once, with each run's lr, weight decay, clip coefficient and bias
corrections as per-tensor scalars of torch's `_foreach_*` ops.

It computes what `apply_update` (backends/local/backend.py) computes for each run alone, op for op: each
run's gradient norm is the norm of its own tensors' norms (`clip_grad_norm_`'s), its clip coefficient is
`min(max_norm / (norm + 1e-6), 1)`, and its AdamW step is `PlainAdamW`'s (torch's single-tensor CPU AdamW:
lerp, mul/addcmul, sqrt / sqrt(bias correction 2) + eps, addcdiv by lr / bias correction 1). A foreach op
applies one tensor op to each tensor of its list in turn, so a run's weights and moments after the pass
are those `apply_update` leaves (tests/shared_trainer/test_update.py). What it saves is the Python and
dispatch cost of about 15 ops per tensor per run: at 8 runs of 14 adapted modules, some 3,000 small op
calls become about 20.

Only `PlainAdamW` members (parameters on the CPU) are batched; a member with torch's AdamW (on a GPU,
where torch runs its own multi-tensor step) is updated alone through `apply_update`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from retrain_ray.backends.local.backend import PlainAdamW, apply_update
from retrain_ray.shared_trainer.adapters import RunAdapter
from retrain_ray.util.finite import NonFiniteError

Update = dict[str, float] | NonFiniteError

# torch's foreach ops: private names, but what torch.optim and clip_grad_norm_ themselves call
foreach_add_ = torch._foreach_add_  # pyright: ignore[reportPrivateImportUsage, reportPrivateUsage]
foreach_addcdiv_ = torch._foreach_addcdiv_  # pyright: ignore[reportPrivateImportUsage, reportPrivateUsage]
foreach_addcmul_ = torch._foreach_addcmul_  # pyright: ignore[reportPrivateImportUsage, reportPrivateUsage]
foreach_div_ = torch._foreach_div_  # pyright: ignore[reportPrivateImportUsage, reportPrivateUsage]
foreach_lerp_ = torch._foreach_lerp_  # pyright: ignore[reportPrivateImportUsage, reportPrivateUsage]
foreach_mul_ = torch._foreach_mul_  # pyright: ignore[reportPrivateImportUsage, reportPrivateUsage]
foreach_norm = torch._foreach_norm  # pyright: ignore[reportPrivateImportUsage, reportPrivateUsage]
foreach_sqrt = torch._foreach_sqrt  # pyright: ignore[reportPrivateImportUsage, reportPrivateUsage]


def _vector_norm(t: torch.Tensor, order: float) -> float:
    return float(torch.linalg.vector_norm(t, order))  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType]


@dataclass(frozen=True)
class UpdateOrder:
    """One member's update: its adapter (parameters, optimizer, update count) and this step's lr and decay."""

    adapter: RunAdapter
    lr: float
    weight_decay: float

    @property
    def params(self) -> list[torch.nn.Parameter]:
        return self.adapter.params

    @property
    def update_number(self) -> int:
        return self.adapter.version + 1


def apply_updates(orders: Sequence[UpdateOrder]) -> list[Update]:
    """Each member's `apply_update` result (grad_norm and weight norms), or its `NonFiniteError` (its step
    skipped, its gradients cleared, its weights unchanged), in `orders`' order."""
    out = {i: _alone(o) for i, o in enumerate(orders) if not isinstance(o.adapter.optimizer, PlainAdamW)}
    batched = [i for i in range(len(orders)) if i not in out]
    norms = dict(zip(batched, _grad_norms([orders[i] for i in batched]), strict=True))
    for i, norm in norms.items():
        if not math.isfinite(norm):
            orders[i].adapter.optimizer.zero_grad(set_to_none=True)
            out[i] = _non_finite(norm, orders[i].update_number)
    finite = [i for i in batched if i not in out]
    stepped = [orders[i] for i in finite]
    _clip(stepped, [norms[i] for i in finite])
    before = _weight_norms(stepped)
    _adamw(stepped)
    for i, (start, _), (end, largest) in zip(finite, before, _weight_norms(stepped), strict=True):
        out[i] = {"grad_norm": norms[i], "weight_norm": end, "weight_max_abs": largest,
                  "weight_norm_growth": end / start if start > 0 else 1.0}  # from all-zero weights: not a ratio
    return [out[i] for i in range(len(orders))]


def _alone(order: UpdateOrder) -> Update:
    try:
        return apply_update(order.params, order.adapter.optimizer, lr=order.lr, weight_decay=order.weight_decay,
                            grad_clip_norm=order.adapter.settings.optimizer.grad_clip_norm,
                            update_number=order.update_number)
    except NonFiniteError as exc:
        return exc


def _non_finite(norm: float, update_number: int) -> NonFiniteError:
    return NonFiniteError(
        f"gradient norm is {norm} at update {update_number}: the optimizer step was skipped and the weights "
        "are unchanged; check the rewards, advantages and lr")


def _grads(order: UpdateOrder) -> list[torch.Tensor]:
    return [p.grad for p in order.params if p.grad is not None]


def _spans(sizes: Sequence[int]) -> list[slice]:
    """Consecutive slices of the given lengths (each member's tensors in a flat list of all members')."""
    return [slice(end - size, end) for size, end in zip(sizes, itertools.accumulate(sizes), strict=True)]


@torch.no_grad()
def _grad_norms(orders: Sequence[UpdateOrder]) -> list[float]:
    """Each member's total gradient norm: `clip_grad_norm_`'s norm of its tensors' norms (0 without grads)."""
    grads_R = [_grads(o) for o in orders]
    flat = [g for grads in grads_R for g in grads]
    norms = list(foreach_norm(flat, 2.0)) if flat else []
    totals: list[float] = []
    for span, grads in zip(_spans([len(g) for g in grads_R]), grads_R, strict=True):
        totals.append(_vector_norm(torch.stack(norms[span]), 2.0) if grads else 0.0)
    return totals


@torch.no_grad()
def _clip(orders: Sequence[UpdateOrder], norms: Sequence[float]) -> None:
    """`clip_grad_norm_`'s scaling of each clipping member's gradients by min(max / (norm + 1e-6), 1)."""
    grads: list[torch.Tensor] = []
    coefs: list[float] = []
    for order, norm in zip(orders, norms, strict=True):
        limit = order.adapter.settings.optimizer.grad_clip_norm
        mine = _grads(order)
        if limit <= 0 or not mine:
            continue
        total = torch.tensor(norm, dtype=mine[0].dtype)  # the float32 norm, exactly (it came from one)
        coef = float(torch.clamp(limit / (total + 1e-6), max=1.0))
        grads += mine
        coefs += [coef] * len(mine)
    if grads:
        foreach_mul_(grads, coefs)


@torch.no_grad()
def _weight_norms(orders: Sequence[UpdateOrder]) -> list[tuple[float, float]]:
    """Each member's (L2 norm, largest magnitude) of its trainable weights (`weight_norms`')."""
    flat = [p.detach() for o in orders for p in o.params]
    if not flat:
        return []
    l2 = torch.stack(list(foreach_norm(flat, 2.0)))
    top = torch.stack(list(foreach_norm(flat, math.inf)))
    return [(_vector_norm(l2[span], 2.0), _vector_norm(top[span], math.inf))
            for span in _spans([len(o.params) for o in orders])]


@dataclass
class _Slots:
    """The tensors of one AdamW pass over members with the same betas and eps, with per-tensor scalars."""

    params: list[torch.Tensor]
    grads: list[torch.Tensor]
    exp_avgs: list[torch.Tensor]
    exp_avg_sqs: list[torch.Tensor]
    steps: list[torch.Tensor]
    lrs: list[float]
    decays: list[float]


@torch.no_grad()
def _adamw(orders: Sequence[UpdateOrder]) -> None:
    """`PlainAdamW.step` of every member, with its lr and weight decay set as `apply_update` sets them."""
    groups: dict[tuple[float, float, float], _Slots] = {}
    for order in orders:
        optimizer = order.adapter.optimizer
        assert isinstance(optimizer, PlainAdamW)
        group = optimizer.param_groups[0]
        group["lr"], group["weight_decay"] = order.lr, order.weight_decay
        (beta1, beta2), eps = group["betas"], group["eps"]
        slots = groups.setdefault((beta1, beta2, eps), _Slots([], [], [], [], [], [], []))
        for p in group["params"]:
            if p.grad is None:
                continue
            state = optimizer.state_for(p)
            slots.params.append(p)
            slots.grads.append(p.grad)
            slots.exp_avgs.append(state["exp_avg"])
            slots.exp_avg_sqs.append(state["exp_avg_sq"])
            slots.steps.append(state["step"])
            slots.lrs.append(order.lr)
            slots.decays.append(order.weight_decay)
    for (beta1, beta2, eps), slots in groups.items():
        if slots.params:
            _adamw_pass(slots, beta1, beta2, eps)


def _adamw_pass(s: _Slots, beta1: float, beta2: float, eps: float) -> None:
    """`PlainAdamW._update` on every tensor of `s`, one foreach op per line of it."""
    foreach_add_(s.steps, 1)
    decayed = [(p, 1 - lr * wd) for p, lr, wd in zip(s.params, s.lrs, s.decays, strict=True) if wd != 0]
    if decayed:
        foreach_mul_([p for p, _ in decayed], [factor for _, factor in decayed])
    foreach_lerp_(s.exp_avgs, s.grads, 1 - beta1)
    foreach_mul_(s.exp_avg_sqs, beta2)
    foreach_addcmul_(s.exp_avg_sqs, s.grads, s.grads, value=1 - beta2)
    steps = [float(v) for v in torch.stack(s.steps).tolist()]  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType, reportUnknownArgumentType]
    denoms = foreach_sqrt(s.exp_avg_sqs)
    foreach_div_(denoms, [(1 - beta2**step) ** 0.5 for step in steps])
    foreach_add_(denoms, eps)
    step_sizes = [-(lr / (1 - beta1**step)) for lr, step in zip(s.lrs, steps, strict=True)]
    foreach_addcdiv_(s.params, s.exp_avgs, denoms, step_sizes)
