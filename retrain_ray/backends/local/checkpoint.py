"""Checkpoint files of the local backend: trainable weights plus optimizer state, restored exactly.

Layout inside the (existing) checkpoint directory:
* LoRA: `adapter/` written by PEFT `save_pretrained`, or for the lean LoRA of a built-in model by
  models/lean_lora.py in PEFT's format (the same files: either kind resumes from the other's);
* full fine-tuning: `model.safetensors` with the trainable parameters (tied weights stored once);
* `optimizer.pt`: AdamW `state_dict()` (moments and step counts) and the update count (version).

Unlike the original (which restored only the adapter: resume mode "adapter_only"), the optimizer
moments come back too, so a resumed run continues with the same update it would have made.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, TypeGuard, cast

import torch
from safetensors.torch import load_file, save_file  # pyright: ignore[reportUnknownVariableType]

if TYPE_CHECKING:
    from peft import PeftModel

    from retrain_ray.backends.local.backend import PlainAdamW

from retrain_ray.engines.weights import export_trainable, install_weights
from retrain_ray.models.lean_lora import LeanLoraModel, load_adapter, save_adapter

ADAPTER_DIR = "adapter"
FULL_WEIGHTS_FILE = "model.safetensors"
OPTIMIZER_FILE = "optimizer.pt"


def _is_peft(model: torch.nn.Module) -> TypeGuard[PeftModel]:
    """A PEFT model exists only if peft was imported (to wrap it): a full fine-tune never imports peft."""
    peft = sys.modules.get("peft")
    return peft is not None and isinstance(model, peft.PeftModel)


def save_weights(model: torch.nn.Module, directory: Path) -> None:
    if isinstance(model, LeanLoraModel):
        save_adapter(model, directory / ADAPTER_DIR)
    elif _is_peft(model):
        model.save_pretrained(str(directory / ADAPTER_DIR))
    else:
        tensors = {k: v.contiguous() for k, v in export_trainable(model).items()}
        save_file(tensors, str(directory / FULL_WEIGHTS_FILE))


def _adapter_folder(directory: Path) -> Path:
    """The checkpoint's adapter folder (either LoRA kind), or a clear error when it holds none."""
    adapter = directory / ADAPTER_DIR
    if not (adapter / "adapter_config.json").is_file():
        raise FileNotFoundError(f"{adapter} holds no PEFT adapter: is {directory} a LoRA checkpoint?")
    return adapter


def load_weights(model: torch.nn.Module, directory: Path) -> None:
    if isinstance(model, LeanLoraModel):
        load_adapter(model, _adapter_folder(directory))
        return
    if _is_peft(model):
        from peft import load_peft_weights, set_peft_model_state_dict  # pyright: ignore[reportUnknownVariableType]

        adapter = _adapter_folder(directory)
        device = next(model.parameters()).device
        weights = cast("dict[str, torch.Tensor]", load_peft_weights(str(adapter), device=str(device)))
        result = cast(object, set_peft_model_state_dict(model, weights))
        unexpected: list[str] = list(getattr(result, "unexpected_keys", []) or [])
        if unexpected:
            raise KeyError(f"adapter in {adapter} has unexpected keys, e.g. {unexpected[:3]}")
        return
    path = directory / FULL_WEIGHTS_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: is {directory} a full fine-tuning checkpoint?")
    install_weights(model, load_file(str(path)))


def save_optimizer(optimizer: torch.optim.Optimizer | PlainAdamW, version: int, directory: Path) -> None:
    torch.save({"optimizer": optimizer.state_dict(), "version": version}, directory / OPTIMIZER_FILE)


def load_optimizer(optimizer: torch.optim.Optimizer | PlainAdamW, directory: Path) -> int:
    """Restores the optimizer state; returns the saved version (update count)."""
    path = directory / OPTIMIZER_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: the checkpoint has no optimizer state")
    payload = torch.load(path, map_location="cpu", weights_only=True)
    optimizer.load_state_dict(payload["optimizer"])
    return int(payload["version"])
