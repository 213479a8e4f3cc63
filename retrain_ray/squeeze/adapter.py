"""PEFT adapter directories for squeeze: read the LoRA factor pairs, write a lower-rank copy.

Keys come in pairs `<module>.lora_A.weight` (r x in) and `<module>.lora_B.weight` (out x r). PEFT
scales the update by lora_alpha / r (lora_alpha / sqrt(r) with use_rslora); the compressed adapter's
factors reproduce the unscaled product, so its lora_alpha is rescaled to keep the same scale at the
new rank. Adapters with per-module ranks (rank_pattern), DoRA or extra trainable modules are refused:
compressing them would silently drop parts of the adapter.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

CONFIG = "adapter_config.json"
WEIGHTS = "adapter_model.safetensors"
_A, _B = ".lora_A.weight", ".lora_B.weight"


class AdapterError(ValueError):
    """An adapter directory that squeeze cannot read or compress, with what to do."""


def read_adapter(directory: Path) -> tuple[dict[str, Any], dict[str, tuple[torch.Tensor, torch.Tensor]]]:
    """(adapter_config, {module: (A m x r, B r x n)}) in the spec's orientation (A = lora_A.weight.T)."""
    directory = Path(directory)
    if not (directory / CONFIG).is_file() or not (directory / WEIGHTS).is_file():
        raise AdapterError(f"{directory} holds no PEFT LoRA adapter ({CONFIG} and {WEIGHTS}); "
                           "squeeze needs a run trained with finetune = \"lora\"")
    config = json.loads((directory / CONFIG).read_text())
    _refuse_unsupported(config, directory)
    tensors = load_file(str(directory / WEIGHTS))
    layers, others = {}, []
    for key, a in tensors.items():
        if key.endswith(_A):
            module = key.removesuffix(_A)
            b = tensors.get(module + _B)
            if b is None:
                raise AdapterError(f"{directory / WEIGHTS}: {key} has no matching {module + _B}")
            layers[module] = (a.T, b.T)
        elif not key.endswith(_B):
            others.append(key)
    if others:
        raise AdapterError(f"{directory / WEIGHTS} holds non-LoRA tensors (e.g. {others[0]}): squeeze would drop them")
    if not layers:
        raise AdapterError(f"{directory / WEIGHTS} holds no lora_A/lora_B pairs")
    return config, layers


def _refuse_unsupported(config: dict[str, Any], directory: Path) -> None:
    if config.get("peft_type", "LORA") != "LORA":
        raise AdapterError(f"{directory}: peft_type {config.get('peft_type')!r} is not LoRA")
    if config.get("use_dora"):
        raise AdapterError(f"{directory}: DoRA adapters carry magnitude vectors squeeze does not compress")
    if config.get("rank_pattern") or config.get("alpha_pattern"):
        raise AdapterError(f"{directory}: per-module ranks (rank_pattern/alpha_pattern) are not supported")


def scaled_alpha(config: dict[str, Any], new_rank: int) -> float:
    """lora_alpha at `new_rank` that keeps the adapter's scale (alpha / r, or alpha / sqrt(r) with rsLoRA)."""
    alpha, rank = float(config.get("lora_alpha", config["r"])), int(config["r"])
    ratio = new_rank / rank
    return alpha * (math.sqrt(ratio) if config.get("use_rslora") else ratio)


def write_adapter(directory: Path, config: dict[str, Any], layers: dict[str, tuple[torch.Tensor, torch.Tensor]],
                  new_rank: int, dtype: torch.dtype) -> None:
    """Writes a PEFT adapter of rank `new_rank` (factors in the spec's orientation) atomically."""
    directory = Path(directory)
    tmp = directory.with_name(f".{directory.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    tensors = {}
    for module, (a_m_k, b_k_n) in layers.items():
        tensors[module + _A] = a_m_k.T.to(dtype).contiguous()
        tensors[module + _B] = b_k_n.T.to(dtype).contiguous()
    save_file(tensors, str(tmp / WEIGHTS))
    new_config = {**config, "r": new_rank, "lora_alpha": scaled_alpha(config, new_rank)}
    (tmp / CONFIG).write_text(json.dumps(new_config, indent=2, sort_keys=True))
    if directory.exists():
        shutil.rmtree(directory)
    os.replace(tmp, directory)
