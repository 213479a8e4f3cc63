"""PEFT adapter folders for the lean LoRA: written as PEFT writes them, read back from PEFT's or ours.

A folder holds `adapter_config.json` (`json.dumps(..., indent=2, sort_keys=True)` of PEFT's LoraConfig
fields, models/lean_lora.py `peft_adapter_config`) and `adapter_model.safetensors` with every LoRA tensor
of the state dict under PEFT's saved names: the parameter name without the adapter name
(`base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight`), metadata `{"format": "pt"}`. So
`peft.PeftModel.from_pretrained` loads it onto transformers' Llama, `retrain-ray squeeze` and vLLM's LoRA
loader read it, and an adapter PEFT wrote (a checkpoint of an older version) loads into the lean LoRA.
PEFT's model card (README.md) is not written.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file  # pyright: ignore[reportUnknownVariableType]

from retrain_ray.models.lean_lora import ADAPTER, LeanLoraModel

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
    loaded = {live_name(k): v for k, v in load_file(str(folder / WEIGHTS_FILE)).items()}
    params = {k: v for k, v in model.state_dict(keep_vars=True).items() if "lora_" in k}
    unexpected, missing = sorted(set(loaded) - set(params)), sorted(set(params) - set(loaded))
    if unexpected or missing:
        raise KeyError(f"adapter in {folder} does not match the model's LoRA layers: unexpected keys "
                       f"{unexpected[:3]}, missing keys {missing[:3]} (same lora_rank, target modules and layers?)")
    for name, tensor in loaded.items():
        if tensor.shape != params[name].shape:
            raise ValueError(f"adapter in {folder}: {name} has shape {tuple(tensor.shape)}, the model's is "
                             f"{tuple(params[name].shape)} (a different lora_rank?)")
    with torch.no_grad():
        for name, tensor in loaded.items():
            params[name].copy_(tensor.to(device=params[name].device, dtype=params[name].dtype))
