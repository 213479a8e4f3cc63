"""A torch-only LoRA for the lean Llama: what PEFT's LoRA computes, in PEFT's layout, without peft.

A built-in model trained with LoRA gets it (`lean_applies` in models/names.py). PEFT's `lora.Linear`
checks adapters, merging, mixed batches and variants in Python on each of the 14 adapted Linears of every
forward pass, and PEFT needs transformers' model under it: on issue 13's 0.3 M-parameter model that
dispatch and set-up were about a quarter of an RL step. This module computes PEFT 0.21's vanilla LoRA op
for op: `base(x) + lora_B(lora_A(dropout(x))) * (alpha / r)`, the input cast to the adapter's dtype and the
sum cast back to the base output's, as `lora.Linear.forward` does.

* Same layout: `LeanLoraModel.base_model.model` is the lean Llama and each adapted Linear becomes a
  `LoraLinear` with `base_layer`, `lora_dropout`, `lora_A`, `lora_B` (`ModuleDict`s keyed "default", in
  PEFT's registration order), so parameter names (`base_model.model.model.layers.0.self_attn.q_proj.
  lora_A.default.weight`), their order (the optimizer state's), weight-sync tensors and adapter files are
  PEFT's own (files: models/lean_adapter.py).
* Same init: PEFT visits `named_modules()` in order, creates lora_A then lora_B as `nn.Linear` (each draws
  its default init from the RNG), then re-draws A with `kaiming_uniform_(a=sqrt(5))` and zeros B; so does
  `LoraLinear`, so one seed gives bitwise the same adapter. On a bf16/fp16 base PEFT rounds the new
  weights to the base dtype and then keeps the adapter in float32 (`autocast_adapter_dtype`); so does this.
* Same targets: PEFT's matching (a module named exactly, or ending in `.<target>`; with layers to
  transform, the first `<layers_pattern>.<i>.` index of its name must be listed); base weights frozen.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn

from retrain_ray.models.lean_llama import (
    GenerationSettings,
    KVCache,
    LeanLlamaConfig,
    LeanLlamaForCausalLM,
    LeanOutput,
)

ADAPTER = "default"
_HALF = (torch.float16, torch.bfloat16)


class LoraLinear(nn.Module):
    """PEFT's `lora.Linear` with one adapter ("default"): `base_layer(x) + B(A(dropout(x))) * scaling`."""

    def __init__(self, base_layer: nn.Linear, rank: int, scaling: float, dropout: float) -> None:
        super().__init__()
        self.base_layer = base_layer
        self.lora_dropout = nn.ModuleDict({ADAPTER: nn.Dropout(p=dropout) if dropout > 0.0 else nn.Identity()})
        lora_a = nn.Linear(base_layer.in_features, rank, bias=False)  # each draws nn.Linear's init, as PEFT's
        lora_b = nn.Linear(rank, base_layer.out_features, bias=False)
        self.lora_A = nn.ModuleDict({ADAPTER: lora_a})
        self.lora_B = nn.ModuleDict({ADAPTER: lora_b})
        self.scaling = scaling
        self.has_dropout = dropout > 0.0  # nn.Identity otherwise: its call is skipped (it returns x)
        nn.init.kaiming_uniform_(lora_a.weight, a=math.sqrt(5))
        nn.init.zeros_(lora_b.weight)
        weight = base_layer.weight
        for module in (self.lora_dropout[ADAPTER], lora_a, lora_b):  # PEFT: to the base layer's device and dtype
            module.to(weight.device, dtype=weight.dtype)
        if weight.dtype in _HALF:  # ... then half-precision adapters back to float32
            for module in (lora_a, lora_b):
                module.to(torch.float32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        result = self.base_layer(x)
        a = _weight(self.lora_A)
        if x.dtype != a.dtype:
            x = x.to(a.dtype)
        if self.has_dropout:
            x = self.lora_dropout[ADAPTER](x)
        out = result + F.linear(F.linear(x, a), _weight(self.lora_B)) * self.scaling
        return out if out.dtype == result.dtype else out.to(result.dtype)


def _weight(modules: nn.ModuleDict) -> torch.Tensor:
    return cast("nn.Linear", modules[ADAPTER]).weight


class LoraHolder(nn.Module):
    """PEFT's `LoraModel`: holds the adapted model as `model` (the `base_model.model.` of every name)."""

    def __init__(self, model: LeanLlamaForCausalLM) -> None:
        super().__init__()
        self.model = model

    def forward(self, *args: Any, **kwargs: Any) -> LeanOutput:
        return self.model(*args, **kwargs)


class LeanLoraModel(nn.Module):
    """PEFT's `PeftModelForCausalLM` over the lean Llama: same call, outputs, names and adapter config."""

    def __init__(self, model: LeanLlamaForCausalLM, adapter_config: dict[str, Any]) -> None:
        super().__init__()
        self.base_model = LoraHolder(model)
        self.adapter_config = adapter_config  # adapter_config.json's fields (models/lean_adapter.py)

    @property
    def llama(self) -> LeanLlamaForCausalLM:
        return self.base_model.model

    @property
    def config(self) -> LeanLlamaConfig:
        return self.base_model.model.config

    @property
    def generation_config(self) -> GenerationSettings:
        return self.base_model.model.generation_config

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None, past_key_values: KVCache | None = None,
                use_cache: bool | None = None) -> LeanOutput:
        return self.base_model.model(input_ids, attention_mask, position_ids, past_key_values, use_cache)


def is_lora_target(key: str, targets: Sequence[str], layers: Sequence[int], layers_pattern: str) -> bool:
    """PEFT's `check_target_module_exists` for a list of target names (no exclusions, no regex string)."""
    if key in targets:
        return True
    if not any(key.endswith(f".{t}") for t in targets):
        return False
    if not layers:
        return True
    if layers_pattern:
        match = re.match(rf"(?:^|.*?\.){layers_pattern}\.(?P<idx>\d+)\.", key)
    else:
        match = re.match(r".*?\.[^.]*\.(?P<idx>\d+)\.", key)
    return match is not None and int(match["idx"]) in layers


def apply_lean_lora(
    model: LeanLlamaForCausalLM, *, rank: int, alpha: float, dropout: float, target_modules: Sequence[str],
    layers_to_transform: Sequence[int] = (), layers_pattern: str = "layers", freeze_a: bool = False,
) -> LeanLoraModel:
    """The lean Llama with PEFT's LoRA on `target_modules` (names present in the model), base frozen."""
    if rank <= 0:
        raise ValueError(f"LoRA rank must be > 0, got {rank}")
    scaling = alpha / rank
    keys = [name for name, _ in model.named_modules()]
    for key in keys:
        if not is_lora_target(key, target_modules, layers_to_transform, layers_pattern):
            continue
        parent_name, _, child = key.rpartition(".")
        parent = model.get_submodule(parent_name)
        base = getattr(parent, child)
        if not isinstance(base, nn.Linear) or base.bias is not None:
            raise ValueError(f"LoRA target {key!r} is a {type(base).__name__}: the lean LoRA adapts bias-free "
                             "Linear layers only; set backend option lora_target_modules to Linear names")
        setattr(parent, child, LoraLinear(base, rank, scaling, dropout))
    wrapped = LeanLoraModel(model, peft_adapter_config(
        model, rank=rank, alpha=alpha, dropout=dropout, target_modules=target_modules,
        layers_to_transform=layers_to_transform, layers_pattern=layers_pattern))
    for name, param in wrapped.named_parameters():
        param.requires_grad_("lora_" in name and not (freeze_a and ".lora_A." in name))
    return wrapped


# adapter_config.json as PEFT 0.21.2 writes it for a LoraConfig that sets only r, lora_alpha, lora_dropout,
# target_modules, layers_to_transform, layers_pattern and task_type (the rest are LoraConfig's defaults)
PEFT_FORMAT_VERSION = "0.21.2"
_PEFT_DEFAULTS: dict[str, Any] = {
    "alora_invocation_tokens": None, "alpha_pattern": {}, "arrow_config": None, "auto_mapping": None,
    "bias": "none", "corda_config": None, "ensure_weight_tying": False, "eva_config": None,
    "exclude_modules": None, "fan_in_fan_out": False, "inference_mode": True, "init_lora_weights": True,
    "kasa_config": None, "layer_replication": None, "loftq_config": {}, "lora_bias": False,
    "lora_ga_config": None, "megatron_config": None, "megatron_core": "megatron.core", "modules_to_save": None,
    "monteclora_config": None, "peft_type": "LORA", "peft_version": PEFT_FORMAT_VERSION, "qalora_group_size": 16,
    "rank_pattern": {}, "revision": None, "target_parameters": None, "task_type": "CAUSAL_LM",
    "trainable_token_indices": None, "use_bdlora": None, "use_dora": False, "use_qalora": False,
    "use_rslora": False, "velora_config": None,
}


def peft_adapter_config(
    model: LeanLlamaForCausalLM, *, rank: int, alpha: float, dropout: float, target_modules: Sequence[str],
    layers_to_transform: Sequence[int], layers_pattern: str,
) -> dict[str, Any]:
    """The fields of PEFT's adapter_config.json for this adapter (`inference_mode` true, as PEFT saves it)."""
    return {
        **_PEFT_DEFAULTS, "base_model_name_or_path": model.name_or_path or None, "r": rank, "lora_alpha": alpha,
        "lora_dropout": dropout, "target_modules": sorted(target_modules),
        "layers_to_transform": list(layers_to_transform) or None,
        "layers_pattern": layers_pattern if layers_to_transform else None,
    }
