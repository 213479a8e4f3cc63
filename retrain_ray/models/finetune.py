"""What gets trained: LoRA adapters (default) or every weight (`finetune="full"`).

LoRA is PEFT's on a transformers model, and the torch-only lean LoRA (models/lean_lora.py: PEFT's
computation, init, parameter names and adapter files) on the lean Llama of a built-in model.

LoRA follows the original local backend (spec 1.7): `r = rank`, `alpha = alpha if alpha > 0 else
2 * rank`, `dropout`, target modules q,k,v,o,gate,up,down_proj by default. Departure: the requested
target modules are filtered to those present in the model (so the same default works on models that
lack, e.g., gate_proj), and asking for modules of which none exist is an error naming them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import cast

import torch

from retrain_ray.models.lean_llama import LeanLlamaForCausalLM
from retrain_ray.models.lean_lora import apply_lean_lora
from retrain_ray.models.lora import DEFAULT_TARGET_MODULES, LoraSettings

__all__ = ["DEFAULT_TARGET_MODULES", "LoraSettings", "apply_full", "apply_lora", "prepare_trainable",
           "present_target_modules"]


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
