"""A torch-only LoRA for the lean Llama: what PEFT's LoRA computes, in PEFT's layout, without peft.

A built-in model trained with LoRA gets it (`lean_applies` in models/context.py). PEFT's `lora.Linear`
checks adapters, merging, mixed batches and variants in Python on each of the 14 adapted Linears of every
forward pass, and PEFT needs transformers' model under it: on issue 13's 0.3 M-parameter model that
dispatch and set-up were about a quarter of an RL step. This module computes PEFT 0.21's vanilla LoRA op
for op: `base(x) + lora_B(lora_A(dropout(x))) * (alpha / r)`, the input cast to the adapter's dtype and the
sum cast back to the base output's, as `lora.Linear.forward` does. One departure: on a half-precision
base (`[inference] dtype = "bf16"`, or activations under autocast) the float32 adapter is cast to the
activations' dtype instead, as autocast casts a weight, which on a bf16 CPU step is far cheaper than casting
every activation to float32 and back; the adapter and its gradients stay float32.

* Same layout: `LeanLoraModel.base_model.model` is the lean Llama and each adapted Linear becomes a
  `LoraLinear` with `base_layer`, `lora_dropout`, `lora_A`, `lora_B` (`ModuleDict`s keyed "default", in
  PEFT's registration order), so parameter names (`base_model.model.model.layers.0.self_attn.q_proj.
  lora_A.default.weight`), their order (the optimizer state's), weight-sync tensors and adapter files are
  PEFT's own (files: models/lean_lora.py).
* Same init: PEFT visits `named_modules()` in order, creates lora_A then lora_B as `nn.Linear` (each draws
  its default init from the RNG), then re-draws A with `kaiming_uniform_(a=sqrt(5))` and zeros B; so does
  `LoraLinear`, so one seed gives bitwise the same adapter. On a bf16/fp16 base PEFT rounds the new
  weights to the base dtype and then keeps the adapter in float32 (`autocast_adapter_dtype`); so does this.
* Same targets: PEFT's matching (a module named exactly, or ending in `.<target>`; with layers to
  transform, the first `<layers_pattern>.<i>.` index of its name must be listed); base weights frozen.

PEFT adapter folders for the lean LoRA: written as PEFT writes them, read back from PEFT's or ours.

A folder holds `adapter_config.json` (`json.dumps(..., indent=2, sort_keys=True)` of PEFT's LoraConfig
fields, models/lean_lora.py `peft_adapter_config`) and `adapter_model.safetensors` with every LoRA tensor
of the state dict under PEFT's saved names: the parameter name without the adapter name
(`base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight`), metadata `{"format": "pt"}`. So
`peft.PeftModel.from_pretrained` loads it onto transformers' Llama, `retrain-ray squeeze` and vLLM's LoRA
loader read it, and an adapter PEFT wrote (a checkpoint of an older version) loads into the lean LoRA.
PEFT's model card (README.md) is not written.

What gets trained: LoRA adapters (default) or every weight (`finetune="full"`).

LoRA is PEFT's on a transformers model, and the torch-only lean LoRA (models/lean_lora.py: PEFT's
computation, init, parameter names and adapter files) on the lean Llama of a built-in model.

LoRA follows the original local backend (spec 1.7): `r = rank`, `alpha = alpha if alpha > 0 else
2 * rank`, `dropout`, target modules q,k,v,o,gate,up,down_proj by default. Departure: the requested
target modules are filtered to those present in the model (so the same default works on models that
lack, e.g., gate_proj), and asking for modules of which none exist is an error naming them.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, cast

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file  # pyright: ignore[reportUnknownVariableType]
from torch import nn

from retrain_ray.models.lean_llama import (
    GenerationSettings,
    KVCache,
    LeanLlamaConfig,
    LeanLlamaForCausalLM,
    LeanOutput,
)
from retrain_ray.models.lora import DEFAULT_TARGET_MODULES, LoraSettings

ADAPTER = "default"
FLOAT32_LORA_BELOW_ROWS = 64
"""Sampling on a half base with fewer rows than this runs the adapter in float32 (the measured crossover)."""
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
        if x.dtype in _HALF:
            return self._half_forward(x, result)
        a = _weight(self.lora_A)
        if x.dtype != a.dtype:
            x = x.to(a.dtype)
        if self.has_dropout:
            x = self.lora_dropout[ADAPTER](x)
        out = result + F.linear(F.linear(x, a), _weight(self.lora_B)) * self.scaling
        return out if out.dtype == result.dtype else out.to(result.dtype)

    def _half_forward(self, x: torch.Tensor, result: torch.Tensor) -> torch.Tensor:
        """A half-precision base (bf16 weights, or activations under autocast): the float32 adapter is cast to
        the activations' dtype, as autocast casts a weight, instead of each activation being cast to float32
        and back (PEFT's way; on a bf16 CPU step those casts cost more than the adapter's matmuls). Gradients
        still reach the float32 adapter through the cast. While sampling (inference mode) the half copies
        are kept until training changes the adapter, and the sum is added in place; a decode step's few rows run
        the adapter in float32 instead (a rank-8 bf16 matmul on under 64 rows costs 70-100 us on the CPU, three
        times the float32 one)."""
        if torch.is_inference_mode_enabled():
            if x.numel() < FLOAT32_LORA_BELOW_ROWS * x.shape[-1]:  # a decode step's few rows
                lora = F.linear(F.linear(x.float(), _weight(self.lora_A)), _weight(self.lora_B))
                return result.add_(lora.to(result.dtype), alpha=self.scaling)
            a, b = self._half_adapter(x.dtype)
            flat = result.view(-1, result.shape[-1])  # the base layer's fresh, contiguous output
            flat.addmm_(F.linear(x, a).view(-1, a.shape[0]), b.t(), alpha=self.scaling)
            return result
        a, b = _weight(self.lora_A).to(x.dtype), _weight(self.lora_B).to(x.dtype)
        if self.has_dropout:
            x = self.lora_dropout[ADAPTER](x)
        return result + F.linear(F.linear(x, a), b) * self.scaling

    def _half_adapter(self, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        a, b = _weight(self.lora_A), _weight(self.lora_B)
        key = (dtype, a._version, b._version, a.data_ptr(), b.data_ptr())
        cached = self.__dict__.get("_half_cache")
        if cached is None or cached[0] != key:
            cached = (key, a.detach().to(dtype), b.detach().to(dtype))
            self.__dict__["_half_cache"] = cached
        return cached[1], cached[2]


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
        self.adapter_config = adapter_config  # adapter_config.json's fields (models/lean_lora.py)

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
                use_cache: bool | None = None, logits_to_keep: int = 0) -> LeanOutput:
        return self.base_model.model(input_ids, attention_mask, position_ids, past_key_values, use_cache,
                                     logits_to_keep)


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


CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILE = "adapter_model.safetensors"
_IN_MODEL = {f".lora_{m}.": f".lora_{m}.{ADAPTER}." for m in "AB"}


def saved_name(name: str) -> str:
    """A LoRA parameter's name in an adapter file (PEFT drops the adapter name)."""
    for saved, live in _IN_MODEL.items():
        name = name.replace(live, saved)
    return name


def live_name(name: str) -> str:
    """An adapter file's tensor name as the model's parameter (PEFT inserts the adapter name)."""
    for saved, live in _IN_MODEL.items():
        if live not in name:
            name = name.replace(saved, live)
    return name


def adapter_tensors(model: LeanLoraModel) -> dict[str, torch.Tensor]:
    """Saved name -> tensor for every LoRA weight (frozen ones too, as PEFT saves them)."""
    return {saved_name(k): v.detach().contiguous() for k, v in model.state_dict().items() if "lora_" in k}


def save_adapter(model: LeanLoraModel, folder: str | Path) -> None:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / CONFIG_FILE).write_text(json.dumps(model.adapter_config, indent=2, sort_keys=True))
    save_file(adapter_tensors(model), str(folder / WEIGHTS_FILE), metadata={"format": "pt"})


def load_adapter(model: LeanLoraModel, folder: str | Path) -> None:
    """Copies the folder's adapter weights into the model in place; every LoRA weight must be there, with
    its shape (a different rank or set of targets is an error naming them)."""
    folder = Path(folder)
    if not (folder / CONFIG_FILE).is_file() or not (folder / WEIGHTS_FILE).is_file():
        raise FileNotFoundError(f"{folder} holds no PEFT adapter ({CONFIG_FILE} and {WEIGHTS_FILE})")
    params = {k: v for k, v in model.state_dict(keep_vars=True).items() if "lora_" in k}
    copy_adapter_file(folder, params, owner="the model")


def copy_adapter_file(folder: Path, params: dict[str, torch.Tensor], *, owner: str) -> None:
    """Copies the adapter weights saved in `folder` into `params` (live LoRA names) in place: the same names
    and shapes or an error naming them, `owner` saying whose layers they are ("the model", "run 'a'")."""
    loaded = {live_name(k): v for k, v in load_file(str(folder / WEIGHTS_FILE)).items()}
    unexpected, missing = sorted(set(loaded) - set(params)), sorted(set(params) - set(loaded))
    if unexpected or missing:
        raise KeyError(f"adapter in {folder} does not match {owner}'s LoRA layers: unexpected keys "
                       f"{unexpected[:3]}, missing keys {missing[:3]} (same lora_rank, target modules and layers?)")
    for name, tensor in loaded.items():
        if tensor.shape != params[name].shape:
            raise ValueError(f"adapter in {folder}: {name} has shape {tuple(tensor.shape)}, {owner}'s is "
                             f"{tuple(params[name].shape)} (a different lora_rank?)")
    with torch.no_grad():
        for name, tensor in loaded.items():
            params[name].copy_(tensor.to(device=params[name].device, dtype=params[name].dtype))


__all__ = ["DEFAULT_TARGET_MODULES", "LoraSettings", "apply_full", "apply_lora", "copy_adapter_file",
           "prepare_trainable", "present_target_modules"]


def present_target_modules(model: torch.nn.Module, requested: tuple[str, ...]) -> list[str]:
    """The requested module names that occur (as the last name component of a Linear) in `model`."""
    modules = cast("Iterator[tuple[str, torch.nn.Module]]", model.named_modules())  # pyright: ignore[reportUnknownMemberType]
    names = {name.rsplit(".", 1)[-1] for name, mod in modules if isinstance(mod, torch.nn.Linear)}
    present = [m for m in requested if m in names]
    if not present:
        raise ValueError(
            f"LoRA target modules {list(requested)} match no Linear layer of the model (it has e.g. "
            f"{sorted(names)[:8]}): set backend option lora_target_modules to names that exist"
        )
    return present


def apply_lora(model: torch.nn.Module, lora: LoraSettings) -> torch.nn.Module:
    if lora.rank <= 0:
        raise ValueError(f"model.lora_rank must be > 0 for LoRA fine-tuning, got {lora.rank}")
    targets = present_target_modules(model, lora.target_modules)
    if isinstance(model, LeanLlamaForCausalLM):
        return apply_lean_lora(
            model, rank=lora.rank, alpha=lora.effective_alpha, dropout=lora.dropout, target_modules=targets,
            layers_to_transform=lora.layers_to_transform, layers_pattern=lora.layers_pattern, freeze_a=lora.freeze_a,
        )
    from peft import LoraConfig, get_peft_model  # a second of imports that full fine-tuning never needs

    config = LoraConfig(
        r=lora.rank,
        lora_alpha=lora.effective_alpha,  # pyright: ignore[reportArgumentType]  # peft says int; a float scales alike
        lora_dropout=lora.dropout,
        target_modules=targets,
        layers_to_transform=list(lora.layers_to_transform) or None,
        layers_pattern=lora.layers_pattern if lora.layers_to_transform else None,
        task_type="CAUSAL_LM",
    )
    model = get_peft_model(model, config)
    if lora.freeze_a:
        for name, param in model.named_parameters():
            if ".lora_A." in name:
                param.requires_grad_(False)
    return model


def apply_full(model: torch.nn.Module, lora: LoraSettings) -> torch.nn.Module:
    for p in model.parameters():
        p.requires_grad_(True)
    return model


FINETUNE_MODES: dict[str, Callable[[torch.nn.Module, LoraSettings], torch.nn.Module]] = {
    "lora": apply_lora,
    "full": apply_full,
}


def prepare_trainable(model: torch.nn.Module, finetune: str, lora: LoraSettings) -> torch.nn.Module:
    """Wraps/marks the model for the finetune mode; returns the model to train and sample with."""
    if finetune not in FINETUNE_MODES:
        raise ValueError(f"finetune={finetune!r} is not one of {sorted(FINETUNE_MODES)}")
    return FINETUNE_MODES[finetune](model, lora)
