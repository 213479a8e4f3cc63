"""AdamW for CPU training without `torch.optim.Optimizer`, whose first call imports torch._dynamo.

`torch.optim.Optimizer.__init__`, `zero_grad` and `step` are wrapped in `torch._disable_dynamo`, which
imports torch._dynamo (with sympy and torch.distributed) on first use: about 1.3 s on a quiet 2-core
machine, a third of a tiny run's time to its first step (issue 13). `PlainAdamW` is what
`torch.optim.AdamW(foreach=None)` runs on CPU parameters (its single-tensor path, which torch picks for
CPU tensors), op for op, so the weights and moments after every step are bitwise torch's
(tests/test_adamw.py), and its `state_dict` is torch's format: a checkpoint's `optimizer.pt` loads into
either. `make_adamw` uses it when every parameter is on the CPU; on a GPU torch picks its multi-tensor
path, so torch's AdamW is kept there.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable

import torch
from torch.optim.optimizer import StateDict

ParamGroup = StateDict
"""One parameter group in torch's layout (`dict[str, Any]`), so this class and torch's AdamW interchange."""

_GROUP_DEFAULTS: ParamGroup = {"amsgrad": False, "maximize": False, "foreach": None, "capturable": False,
                                   "differentiable": False, "fused": None, "decoupled_weight_decay": True}


class PlainAdamW:
    """torch's CPU AdamW step on one param group: `param_groups`, `state`, `zero_grad`, `step`, state dicts."""

    def __init__(self, params: Iterable[torch.nn.Parameter], *, lr: float, betas: tuple[float, float],
                 eps: float, weight_decay: float) -> None:
        group: ParamGroup = {"params": list(params), "lr": lr, "betas": tuple(betas), "eps": eps,
                                 "weight_decay": weight_decay, **_GROUP_DEFAULTS}
        if not group["params"]:
            raise ValueError("optimizer got an empty parameter list")
        self.param_groups: list[ParamGroup] = [group]
        self.state: dict[torch.Tensor, dict[str, torch.Tensor]] = {}

    def zero_grad(self, set_to_none: bool = True) -> None:
        if not set_to_none:
            raise ValueError("PlainAdamW.zero_grad(set_to_none=False) is not supported: gradients are always "
                             "set to None; call zero_grad() or zero_grad(set_to_none=True)")
        for p in self.param_groups[0]["params"]:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    self._update(p, p.grad, group)

    def _update(self, param: torch.Tensor, grad: torch.Tensor, group: ParamGroup) -> None:
        """torch.optim.adam._single_tensor_adam with decoupled weight decay, no amsgrad/maximize/capturable."""
        lr, (beta1, beta2), eps, weight_decay = group["lr"], group["betas"], group["eps"], group["weight_decay"]
        state = self.state.get(param)
        if state is None:
            state = self.state[param] = {
                "step": torch.tensor(0.0, dtype=torch.get_default_dtype()),
                "exp_avg": torch.zeros_like(param, memory_format=torch.preserve_format),
                "exp_avg_sq": torch.zeros_like(param, memory_format=torch.preserve_format),
            }
        exp_avg, exp_avg_sq, step_t = state["exp_avg"], state["exp_avg_sq"], state["step"]
        step_t += 1
        if weight_decay != 0:
            param.mul_(1 - lr * weight_decay)
        exp_avg.lerp_(grad, 1 - beta1)
        exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        step = step_t.item()
        bias_correction1 = 1 - beta1**step
        bias_correction2 = 1 - beta2**step
        step_size = lr / bias_correction1
        denom = (exp_avg_sq.sqrt() / bias_correction2**0.5).add_(eps)
        param.addcdiv_(exp_avg, denom, value=-step_size)

    def state_dict(self) -> StateDict:
        """torch.optim.Optimizer.state_dict's layout: state keyed by parameter index, groups without params."""
        index = {id(p): i for i, p in enumerate(self.param_groups[0]["params"])}
        groups = [{**{k: v for k, v in g.items() if k != "params"}, "params": [index[id(p)] for p in g["params"]]}
                  for g in self.param_groups]
        return {"state": {index[id(p)]: s for p, s in self.state.items()}, "param_groups": groups}

    def load_state_dict(self, state_dict: StateDict) -> None:
        """Loads this class's or torch.optim.AdamW's state dict (moments cast to each parameter's dtype)."""
        saved = copy.deepcopy(state_dict)
        params = self.param_groups[0]["params"]
        groups = saved["param_groups"]
        if len(groups) != 1 or len(groups[0]["params"]) != len(params):
            sizes = [len(g["params"]) for g in groups]
            raise ValueError(f"optimizer state has parameter groups of sizes {sizes}; this optimizer has one group "
                             f"of {len(params)} parameters: the checkpoint is of another model or finetune mode")
        by_index = dict(zip(groups[0]["params"], params, strict=True))
        self.state = {}
        for i, values in saved["state"].items():
            p = by_index[i]
            self.state[p] = {k: v if k == "step" else v.to(dtype=p.dtype, device=p.device) for k, v in values.items()}
        self.param_groups = [{**groups[0], "params": params}]


def make_adamw(params: list[torch.nn.Parameter], *, betas: tuple[float, float],
               eps: float) -> PlainAdamW | torch.optim.AdamW:
    """`PlainAdamW` for CPU parameters, torch's AdamW otherwise (lr and weight decay are set per step)."""
    if all(p.device.type == "cpu" for p in params):
        return PlainAdamW(params, lr=0.0, betas=betas, eps=eps, weight_decay=0.0)
    return torch.optim.AdamW(params, lr=0.0, betas=betas, eps=eps, weight_decay=0.0)
