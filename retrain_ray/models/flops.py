"""FLOPs per token of a model, for the back-pressure roofline hint (`[backpressure] peak_gflops`).

The estimate is the usual dense-transformer one: 2·N FLOPs per token for the forward pass and 4·N for
the backward pass, so a trained token costs 6·N, with N the model's parameter count (embeddings
included). It ignores attention's sequence-length term and counts a LoRA run as full backward work (the
activation gradients still flow through every frozen weight), so it is an upper-side estimate: the
hint compares the predicted rate against the roof, it does not measure utilisation.
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM

from retrain_ray.models.loading import resolve_model_path

TRAIN_FLOPS_PER_PARAM = 6.0


def parameter_count(model: str, *, revision: str = "", cache_dir: str | Path | None = None) -> int:
    """Parameters of `model` (a built-in name, a local folder or a cached Hub id), counted on the meta
    device: the architecture is built from its config.json, no weights are read."""
    config = AutoConfig.from_pretrained(resolve_model_path(model, cache_dir, revision=revision))
    with torch.device("meta"):
        net = AutoModelForCausalLM.from_config(config)
    return sum(p.numel() for p in net.parameters())


def train_flops_per_token(model: str, *, revision: str = "", cache_dir: str | Path | None = None) -> float:
    """6·N FLOPs per trained token (see the module docstring)."""
    return TRAIN_FLOPS_PER_PARAM * parameter_count(model, revision=revision, cache_dir=cache_dir)
