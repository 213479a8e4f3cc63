"""The shapes of a model that the back-pressure roofline needs (counted by models/flops.py, used by
backpressure/roofline.py). Pure: no torch."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelShapes:
    """What the roofline needs of a model: counted on the meta device (models/flops.py). Picklable."""

    parameters: int
    trainable: int  # parameters the optimizer updates: all (full) or the LoRA adapters'
    bytes_per_param: int  # 4 for float32 weights, 2 for bf16 / fp16
    kv_bytes_per_token: int  # 2 (K and V) x layers x kv_heads x head_dim x bytes_per_param
    full: bool  # full fine-tuning (else LoRA)
