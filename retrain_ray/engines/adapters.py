"""Wire format of a weight upload to the inference endpoint: safetensors bytes with metadata.

`POST /v1/load_lora_adapter` takes a body of safetensors bytes (content type
application/octet-stream). The tensors are named as the trainer's trainable parameters; the
safetensors metadata says what they are:

    lora_name       adapter name requests will use as their `model` field (e.g. the run id)
    version         the trainer's weights version (optimizer steps), an integer
    finetune        "lora" (tensors are PEFT adapter weights) or "full" (every weight of a tiny model)
    rank, alpha, dropout, target_modules   the LoRA layout (comma-separated module names)

vLLM's route of the same name takes JSON `{"lora_name", "lora_path"}` instead; `OpenAIEngine` with
`adapter_upload="path"` speaks that form.

Adapter folders that OpenAI-compatible servers load by path, written from the trainer's LoRA tensors.

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
import struct
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load as load_bytes
from safetensors.torch import load_file, save_file  # pyright: ignore[reportUnknownVariableType]
from safetensors.torch import save as save_bytes

from retrain_ray.models.lora import DEFAULT_TARGET_MODULES, LoraSettings


@dataclass(frozen=True)
class AdapterSpec:
    """Name, version and layout of an uploaded adapter (or full weight set)."""

    lora_name: str
    version: int
    finetune: str = "lora"
    lora: LoraSettings = LoraSettings()

    def metadata(self) -> dict[str, str]:
        return {
            "lora_name": self.lora_name, "version": str(self.version), "finetune": self.finetune,
            "rank": str(self.lora.rank), "alpha": str(self.lora.alpha), "dropout": str(self.lora.dropout),
            "target_modules": ",".join(self.lora.target_modules),
        }

    @classmethod
    def from_metadata(cls, meta: dict[str, str]) -> AdapterSpec:
        missing = [k for k in ("lora_name", "version", "finetune") if k not in meta]
        if missing:
            raise ValueError(f"adapter upload lacks safetensors metadata keys {missing}")
        if meta["finetune"] not in ("lora", "full"):
            raise ValueError(f"adapter upload finetune={meta['finetune']!r}; use 'lora' or 'full'")
        modules = tuple(m for m in meta.get("target_modules", "").split(",") if m) or DEFAULT_TARGET_MODULES
        lora = LoraSettings(
            rank=int(meta.get("rank", 32)), alpha=float(meta.get("alpha", 0.0)),
            dropout=float(meta.get("dropout", 0.0)), target_modules=modules,
        )
        return cls(meta["lora_name"], int(meta["version"]), meta["finetune"], lora)


def encode_adapter(spec: AdapterSpec, tensors: dict[str, torch.Tensor]) -> bytes:
    """Tensors (moved to CPU, made contiguous) plus the spec as safetensors metadata."""
    cpu = {name: t.detach().to("cpu").contiguous() for name, t in tensors.items()}
    return save_bytes(cpu, metadata=spec.metadata())


def decode_adapter(payload: bytes) -> tuple[AdapterSpec, dict[str, torch.Tensor]]:
    if len(payload) < 8:
        raise ValueError("adapter upload is not safetensors bytes (shorter than its 8-byte header)")
    (header_len,) = struct.unpack("<Q", payload[:8])
    header = json.loads(payload[8:8 + header_len])
    return AdapterSpec.from_metadata(header.get("__metadata__", {})), load_bytes(payload)


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
