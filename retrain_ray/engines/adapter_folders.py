"""Adapter folders that OpenAI-compatible servers load by path, written from the trainer's LoRA tensors.

* PEFT layout (vLLM, MAX, TensorRT-LLM with `lora_ckpt_source = "hf"`): `adapter_model.safetensors`
  with PEFT's saved names (the in-memory `.default` adapter name dropped) and `adapter_config.json`.
* MLX-LM layout (`mlx_lm.server`'s `adapters` request field, mlx-lm's `load_adapters`):
  `adapters.safetensors` with `<module path>.lora_a` of shape (in, rank) and `.lora_b` of shape
  (rank, out), the transposes of PEFT's A (rank, in) and B (out, rank), and `adapter_config.json` with
  `fine_tune_type = "lora"`, `num_layers` (-1: every layer) and `lora_parameters` {rank, scale, dropout,
  keys}; mlx-lm's scale multiplies the low-rank product as PEFT's alpha / rank does.

`read_peft_folder` and `read_mlx_folder` turn either back into the trainer's names (the stand-in
endpoint loads them with these).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file  # pyright: ignore[reportUnknownVariableType]

from retrain_ray.models.lora import LoraSettings

PEFT_WEIGHTS, MLX_WEIGHTS, CONFIG = "adapter_model.safetensors", "adapters.safetensors", "adapter_config.json"
_PEFT_PREFIX = "base_model.model."
_LORA_NAME = re.compile(r"^(?P<module>.+)\.lora_(?P<ab>[AB])(?:\.default)?\.weight$")


def _lora_parts(name: str) -> tuple[str, str]:
    match = _LORA_NAME.match(name)
    if match is None:
        raise ValueError(f"{name!r} is not a LoRA weight (…lora_A/lora_B…weight): path-loaded adapters need "
                         '[model] finetune = "lora"')
    return match["module"], match["ab"]


def write_peft_folder(folder: Path, lora: LoraSettings, tensors: dict[str, torch.Tensor]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    out: dict[str, torch.Tensor] = {}
    for name, tensor in tensors.items():
        module, ab = _lora_parts(name)
        out[f"{module}.lora_{ab}.weight"] = tensor.detach().to("cpu").contiguous()
    save_file(out, str(folder / PEFT_WEIGHTS))
    (folder / CONFIG).write_text(json.dumps({
        "peft_type": "LORA", "task_type": "CAUSAL_LM", "r": lora.rank, "lora_alpha": lora.effective_alpha,
        "lora_dropout": lora.dropout, "target_modules": list(lora.target_modules), "bias": "none"}))
    return folder


def read_peft_folder(folder: Path) -> tuple[LoraSettings, dict[str, torch.Tensor]]:
    """(layout, tensors under the trainer's names, `.default` adapter) of a PEFT adapter folder."""
    config = json.loads((folder / CONFIG).read_text())
    lora = LoraSettings(rank=int(config["r"]), alpha=float(config["lora_alpha"]),
                        dropout=float(config.get("lora_dropout", 0.0)), target_modules=tuple(config["target_modules"]))
    tensors: dict[str, torch.Tensor] = {}
    for name, tensor in load_file(str(folder / PEFT_WEIGHTS)).items():
        module, ab = _lora_parts(name)
        tensors[f"{module}.lora_{ab}.default.weight"] = tensor
    return lora, tensors


def write_mlx_folder(folder: Path, lora: LoraSettings, tensors: dict[str, torch.Tensor]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    out: dict[str, torch.Tensor] = {}
    keys: set[str] = set()
    for name, tensor in tensors.items():
        module, ab = _lora_parts(name)
        module = module.removeprefix(_PEFT_PREFIX)
        keys.add(re.sub(r"^.*?\.layers\.\d+\.", "", module))
        out[f"{module}.lora_{ab.lower()}"] = tensor.detach().to("cpu").t().contiguous()
    save_file(out, str(folder / MLX_WEIGHTS))
    (folder / CONFIG).write_text(json.dumps({
        "fine_tune_type": "lora", "num_layers": -1,
        "lora_parameters": {"rank": lora.rank, "scale": lora.effective_alpha / lora.rank, "dropout": lora.dropout,
                            "keys": sorted(keys)}}))
    return folder


def read_mlx_folder(folder: Path) -> tuple[LoraSettings, dict[str, torch.Tensor]]:
    config = json.loads((folder / CONFIG).read_text())
    params = config["lora_parameters"]
    rank = int(params["rank"])
    targets = tuple(sorted({k.rsplit(".", 1)[-1] for k in params["keys"]}))
    lora = LoraSettings(rank=rank, alpha=float(params["scale"]) * rank, dropout=float(params.get("dropout", 0.0)),
                        target_modules=targets)
    tensors: dict[str, torch.Tensor] = {}
    for name, tensor in load_file(str(folder / MLX_WEIGHTS)).items():
        module, ab = name.rsplit(".lora_", 1)
        tensors[f"{_PEFT_PREFIX}{module}.lora_{ab.upper()}.default.weight"] = tensor.t().contiguous()
    return lora, tensors
