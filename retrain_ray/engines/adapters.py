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
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass

import torch
from safetensors.torch import load as load_bytes
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
