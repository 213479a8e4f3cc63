"""Local PyTorch training backend: one AdamW update per RL step on a LoRA or fully trainable model.

Per step (spec 1.7 / 3.1): rows are split into micro-batches of `micro_batch_size` (0 = one forward);
each micro-batch's loss sum is divided by the *whole batch's* action-token count before backward, so
accumulation gives the global token-mean (every action token weighs the same) and the same gradient
as one big forward. Then, if `grad_clip_norm > 0`, the gradient norm is clipped (the original ignored
`grad_clip_norm` locally: hazard 13.7); the pre-clip norm is reported as `grad_norm` either way. `lr`
and `weight_decay` are written into every param group at each step. Each update also reports the
trainable weights' L2 norm after it (`weight_norm`), their largest magnitude (`weight_max_abs`) and
`weight_norm_growth` (norm after / before the update): what the run's divergence watch reads
(run/divergence.py). Two reductions over the trainable weights; no copy of them is kept.

The loss is `retrain_ray.algorithms.loss.policy_loss` (standard / kl_cov / clip_cov; sums over a
micro-batch's action tokens). Scoring uses the sampler's temperature and top-p (`scoring.py`), so the first on-policy update has
ratio 1 (hazard 13.8). Forward passes run under bf16 autocast on CUDA, fp32 on CPU. Split-mode
pipelining (the original returned the previous step's loss) is not done here: every step is
synchronous, and `reports_sync_loss` is true.

AdamW for CPU training without `torch.optim.Optimizer`, whose first call imports torch._dynamo.

`torch.optim.Optimizer.__init__`, `zero_grad` and `step` are wrapped in `torch._disable_dynamo`, which
imports torch._dynamo (with sympy and torch.distributed) on first use: about 1.3 s on a quiet 2-core
machine, a third of a tiny run's time to its first step (issue 13). `PlainAdamW` is what
`torch.optim.AdamW(foreach=None)` runs on CPU parameters (its single-tensor path, which torch picks for
CPU tensors), op for op, so the weights and moments after every step are bitwise torch's
(tests/backends/test_adamw.py), and its `state_dict` is torch's format: a checkpoint's `optimizer.pt` loads into
either. `make_adamw` uses it when every parameter is on the CPU; on a GPU torch picks its multi-tensor
path, so torch's AdamW is kept there.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch.optim.optimizer import StateDict

from retrain_ray.algorithms.loss import policy_loss
from retrain_ray.backends.local import checkpoint as ckpt
from retrain_ray.backends.local.options import CAPABILITIES
from retrain_ray.backends.local.scoring import (
    EchoSums,
    count_action_tokens,
    logprobs_from_logits,
    microbatches,
    next_token_logits,
    scored_logprobs,
)
from retrain_ray.backends.types import TrainBatch, TrainStepResult
from retrain_ray.engines.types import WeightUpdate
from retrain_ray.engines.weights import ModeSwitch, export_trainable, trainable_parameters
from retrain_ray.util.finite import NonFiniteError


@dataclass(frozen=True)
class LossSettings:
    """Policy-loss knobs passed to `policy_loss` (names as [training] keys, spec 7)."""

    mode: str = "standard"
    clip_eps: float = 0.0
    clip_eps_high: float = 0.0
    clip_ratio_c: float = 0.0
    kl_cov_percent: float = 0.2
    kl_cov_coef: float = 1.0
    clip_cov_ratio: float = 2e-4
    clip_cov_min: float = 1.0
    clip_cov_max: float = 5.0


@dataclass(frozen=True)
class OptimizerSettings:
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-8
    grad_clip_norm: float = 0.0


class LocalBackend:
    """TrainBackend on an in-process model (already wrapped for LoRA or marked for full fine-tuning)."""

    capabilities = CAPABILITIES

    def __init__(
        self,
        model: torch.nn.Module,
        *,
        top_p: float = 1.0,
        micro_batch_size: int = 0,
        accumulation_steps: int = 1,
        loss: LossSettings | None = None,
        optimizer: OptimizerSettings | None = None,
        shares_model_with_engine: bool = False,
        seed: int = 0,
    ) -> None:
        if not trainable_parameters(model):
            raise ValueError("LocalBackend: the model has no trainable parameters (apply LoRA or finetune='full')")
        self.model = model
        self.device = next(model.parameters()).device
        self.top_p = top_p
        self.micro_batch_size = micro_batch_size
        self.accumulation_steps = max(int(accumulation_steps), 1)
        self.loss = loss or LossSettings()
        self.optim = optimizer or OptimizerSettings()
        self.shares_model_with_engine = shares_model_with_engine
        self._params = list(trainable_parameters(model).values())
        # torch's AdamW on a GPU; on CPU the same step without torch.optim's torch._dynamo import (adamw.py)
        self.optimizer = make_adamw(self._params, betas=(self.optim.beta1, self.optim.beta2), eps=self.optim.eps)
        self._modes = ModeSwitch(model)
        self._loss_generator = torch.Generator(device=self.device)
        self._loss_generator.manual_seed(seed)
        self._version = 0

    @property
    def version(self) -> int:
        return self._version

    def train_step(self, batch: TrainBatch, *, lr: float, weight_decay: float) -> TrainStepResult:
        """One policy-gradient update over the batch; loss and policy metrics are token-weighted."""
        started = time.perf_counter()
        total = max(count_action_tokens(batch), 1)
        sums = {"loss": 0.0, "clip": 0.0, "cov": 0.0, "kl": 0.0, "tokens": 0, "mb": 0}
        self._begin_update()
        loss_kwargs = asdict(self.loss)
        echo = EchoSums(batch)
        for mb in microbatches(batch, self._rows_per_microbatch(batch), self.device):
            logits_B_S_V = next_token_logits(self.model, mb)
            new_lp_B_S = logprobs_from_logits(logits_B_S_V, mb, batch.temperature, self.top_p)
            out = policy_loss(
                new_lp_B_S, mb.old_logprobs_B_S, mb.advantages_B_S, mb.action_mask_B_S,
                generator=self._loss_generator, **loss_kwargs,
            )
            (out.loss_sum / total + echo.term(logits_B_S_V, mb)).backward()  # pyright: ignore[reportUnknownMemberType]
            sums["loss"] += float(out.loss_sum.detach())
            sums["clip"] += float(out.clip_fraction_sum)
            sums["cov"] += float(out.cov_fraction_sum)
            sums["kl"] += float(out.abs_kl_sum)
            sums["tokens"] += int(out.num_action_tokens)
            sums["mb"] += 1
        update = self._finish_update(lr, weight_decay)
        metrics = {
            "clip_fraction": sums["clip"] / total,
            "policy/cov_fraction": sums["cov"] / total,
            "policy/abs_kl": sums["kl"] / total,
            **update,
            "local_action_tokens": float(sums["tokens"]),
            "local_microbatches": float(sums["mb"]),
            "local_train_step_s": time.perf_counter() - started,
            **echo.metrics(),
        }
        return TrainStepResult(loss=sums["loss"] / total, metrics=metrics)

    def sft_step(self, batch: TrainBatch, *, lr: float, weight_decay: float) -> TrainStepResult:
        """Mean loss (T = 1, no top-p) over next tokens whose advantage is nonzero: cross-entropy -log p, or
        with `batch.sft_loss = "importance_sampling"` the original's -exp(log p), whose gradient is p times
        cross-entropy's (a softer push on targets the model finds unlikely)."""
        total = max(count_action_tokens(batch), 1)
        loss_sum = 0.0
        self._begin_update()
        for mb in microbatches(batch, self._rows_per_microbatch(batch), self.device):
            logp_B_S = scored_logprobs(self.model, mb, 1.0, 1.0)
            per_token_B_S = logp_B_S.exp() if batch.sft_loss == "importance_sampling" else logp_B_S
            nll = -(per_token_B_S * mb.action_mask_B_S.to(logp_B_S.dtype)).sum()
            (nll / total).backward()  # pyright: ignore[reportUnknownMemberType]
            loss_sum += float(nll.detach())
        return TrainStepResult(loss=loss_sum / total, metrics=self._finish_update(lr, weight_decay))

    def _rows_per_microbatch(self, batch: TrainBatch) -> int:
        """`micro_batch_size` rows, or the batch split into `accumulation_steps` parts (0 = one forward)."""
        if self.micro_batch_size > 0 or self.accumulation_steps <= 1:
            return self.micro_batch_size
        return -(-len(batch.tokens_D) // self.accumulation_steps)

    def _begin_update(self) -> None:
        self._modes.set(True)
        self.optimizer.zero_grad(set_to_none=True)

    def _finish_update(self, lr: float, weight_decay: float) -> dict[str, float]:
        """Clips (if configured), steps AdamW with this step's lr / wd; returns the pre-clip `grad_norm`
        and the weight norms (`weight_norm`, `weight_max_abs`, `weight_norm_growth`)."""
        metrics = apply_update(self._params, self.optimizer, grad_clip_norm=self.optim.grad_clip_norm, lr=lr,
                               weight_decay=weight_decay, update_number=self._version + 1)
        self._version += 1
        return metrics

    def export_weights(self) -> WeightUpdate:
        """Empty tensors when the engine shares this model (only the version moves), else CPU copies."""
        if self.shares_model_with_engine:
            return WeightUpdate(version=self._version)
        return WeightUpdate(version=self._version, tensors=export_trainable(self.model))

    def save_checkpoint(self, directory: Path) -> None:
        directory = Path(directory)
        if not directory.is_dir():
            raise FileNotFoundError(f"checkpoint directory {directory} does not exist (the caller creates it)")
        ckpt.save_weights(self.model, directory)
        ckpt.save_optimizer(self.optimizer, self._version, directory)

    def load_checkpoint(self, directory: Path) -> None:
        directory = Path(directory)
        ckpt.load_weights(self.model, directory)
        self._version = ckpt.load_optimizer(self.optimizer, directory)


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

    def state_for(self, param: torch.Tensor) -> dict[str, torch.Tensor]:
        """The parameter's AdamW state (step count and both moments), made zero at its first step."""
        state = self.state.get(param)
        if state is None:
            state = self.state[param] = {
                "step": torch.tensor(0.0, dtype=torch.get_default_dtype()),
                "exp_avg": torch.zeros_like(param, memory_format=torch.preserve_format),
                "exp_avg_sq": torch.zeros_like(param, memory_format=torch.preserve_format),
            }
        return state

    @torch.no_grad()
    def step(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    self._update(p, p.grad, group)

    def _update(self, param: torch.Tensor, grad: torch.Tensor, group: ParamGroup) -> None:
        """torch.optim.adam._single_tensor_adam with decoupled weight decay, no amsgrad/maximize/capturable."""
        lr, (beta1, beta2), eps, weight_decay = group["lr"], group["betas"], group["eps"], group["weight_decay"]
        state = self.state_for(param)
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


def apply_update(params: list[torch.nn.Parameter], optimizer: PlainAdamW | torch.optim.AdamW, *,
                 grad_clip_norm: float, lr: float, weight_decay: float, update_number: int) -> dict[str, float]:
    """One optimizer update of `params` from their accumulated gradients: clips (if `grad_clip_norm > 0`),
    steps AdamW with this step's lr / wd; returns the pre-clip `grad_norm` and the weight norms
    (`weight_norm`, `weight_max_abs`, `weight_norm_growth`). The local backend and the shared trainer
    (retrain_ray/shared_trainer/) both update through it, so a run's update is the same in either."""
    grads = [p.grad for p in params if p.grad is not None]
    if grad_clip_norm > 0:
        norm = torch.nn.utils.clip_grad_norm_(params, grad_clip_norm)
    else:
        norm = torch.nn.utils.get_total_norm(grads) if grads else torch.tensor(0.0)
    if not math.isfinite(float(norm)):
        optimizer.zero_grad(set_to_none=True)
        raise NonFiniteError(
            f"gradient norm is {float(norm)} at update {update_number}: the optimizer step was skipped and "
            "the weights are unchanged; check the rewards, advantages and lr"
        )
    for group in optimizer.param_groups:
        group["lr"] = lr
        group["weight_decay"] = weight_decay
    before, _ = weight_norms(params)
    optimizer.step()  # pyright: ignore[reportUnknownMemberType]
    after, largest = weight_norms(params)
    return {"grad_norm": float(norm), "weight_norm": after, "weight_max_abs": largest,
            "weight_norm_growth": after / before if before > 0 else 1.0}  # from all-zero weights: not a ratio


@torch.no_grad()
def weight_norms(params: list[torch.nn.Parameter]) -> tuple[float, float]:
    """L2 norm and largest magnitude of the trainable weights."""
    weights = [p.detach() for p in params]
    return float(torch.nn.utils.get_total_norm(weights)), float(torch.nn.utils.get_total_norm(weights, math.inf))
