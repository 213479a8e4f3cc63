"""FLOPs per token and the shapes of a model, for the back-pressure roofline hint (`[backpressure]
peak_gflops`, `peak_bw_gb_s`; the formulas that use the shapes are in backpressure/usl.py).

The estimate is the usual dense-transformer one: 2·N FLOPs per token for the forward pass and 4·N for
the backward pass, so a trained token costs 6·N, with N the model's parameter count (embeddings
included). It ignores attention's sequence-length term and counts a LoRA run as full backward work (the
activation gradients still flow through every frozen weight), so it is an upper-side estimate: the
hint compares the predicted rate against the roof, it does not measure utilisation.

`rl_step_flops` counts one RL step for a utilization figure (benchmarks/vs_trl.py): sampling costs 2·N per
prompt token (one prefill) and per generated token (one forward each, with a KV cache); training costs
2·N forward plus 2·N backward through the activations per trained token under LoRA (the frozen weights get
no gradient: 4·N), 6·N under full fine-tuning, plus 2·N more when gradient checkpointing recomputes the
forward. Attention's sequence-length term is left out (small at a few hundred tokens).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

from retrain_ray.models.context import ModelShapes
from retrain_ray.models.lean_llama import LeanLlamaForCausalLM
from retrain_ray.models.lean_loading import read_config
from retrain_ray.models.lean_support import lean_config_problem
from retrain_ray.models.loading import resolve_model_path

TRAIN_FLOPS_PER_PARAM = 6.0
FORWARD_FLOPS_PER_PARAM = 2.0


def _meta_model(model: str, revision: str, cache_dir: str | Path | None) -> tuple[Any, torch.nn.Module]:
    """The architecture of `model` (a built-in name, a local folder or a cached Hub id) on the meta
    device, built from its config.json: no weights are read. A Llama the lean path reproduces is built as
    the lean model (same modules and parameters), so counting it does not import transformers."""
    folder = Path(resolve_model_path(model, cache_dir, revision=revision))
    raw = json.loads((folder / "config.json").read_text())
    if isinstance(raw, dict) and lean_config_problem(raw) is None:  # pyright: ignore[reportUnknownArgumentType]
        config = read_config(folder)
        with torch.device("meta"):
            net: torch.nn.Module = LeanLlamaForCausalLM(config)
        return SimpleNamespace(**{**config.raw, **vars(config)}), net
    # deferred: transformers takes seconds to import (and pulls in torch._dynamo); lean models never need it
    from transformers import AutoConfig, AutoModelForCausalLM

    hf_config = AutoConfig.from_pretrained(folder)
    with torch.device("meta"):
        net = AutoModelForCausalLM.from_config(hf_config)
    return hf_config, net


def parameter_count(model: str, *, revision: str = "", cache_dir: str | Path | None = None) -> int:
    """Parameters of `model`, counted on the meta device."""
    return sum(p.numel() for p in _meta_model(model, revision, cache_dir)[1].parameters())


def _bytes_per_param(config: Any) -> int:
    dtype = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)
    return 4 if str(dtype) in ("float32", "torch.float32") else 2


def model_shapes(model: str, *, full: bool, lora_rank: int, target_modules: Sequence[str], revision: str = "",
                 cache_dir: str | Path | None = None) -> ModelShapes:
    """Parameters, LoRA-trainable parameters (rank x (in + out) of every targeted linear layer), weight
    bytes and KV-cache bytes per token of `model`, from its architecture on the meta device."""
    config, net = _meta_model(model, revision, cache_dir)
    total = sum(p.numel() for p in net.parameters())
    targets = set(target_modules)
    lora = sum(lora_rank * (m.in_features + m.out_features) for name, m in net.named_modules()
               if isinstance(m, torch.nn.Linear) and name.rsplit(".", 1)[-1] in targets)
    heads = int(config.num_attention_heads)
    head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // heads)
    kv_heads = int(getattr(config, "num_key_value_heads", None) or heads)
    width = _bytes_per_param(config)
    layers, hidden = int(config.num_hidden_layers), int(config.hidden_size)
    intermediate = int(getattr(config, "intermediate_size", None) or 4 * hidden)
    activations = layers * (10 * hidden + 4 * intermediate) + 3 * int(config.vocab_size)
    return ModelShapes(parameters=total, trainable=total if full else lora, bytes_per_param=width,
                       kv_bytes_per_token=2 * layers * kv_heads * head_dim * width, full=full,
                       activation_elements_per_token=activations)


def train_flops_per_token(model: str, *, revision: str = "", cache_dir: str | Path | None = None) -> float:
    """6·N FLOPs per trained token (see the module docstring)."""
    return TRAIN_FLOPS_PER_PARAM * parameter_count(model, revision=revision, cache_dir=cache_dir)


@dataclass(frozen=True)
class StepFlops:
    """FLOPs of one RL step's sampling and training (see the module docstring for the counts)."""

    sample: float
    train: float

    @property
    def total(self) -> float:
        return self.sample + self.train


def rl_step_flops(parameters: int, *, prompt_tokens: int, completion_tokens: int, lora: bool,
                  checkpointing: bool = False) -> StepFlops:
    """FLOPs of sampling `completion_tokens` after `prompt_tokens` (summed over the step's rows) and then
    training on all of them once."""
    if min(parameters, prompt_tokens, completion_tokens) < 0:
        raise ValueError(f"rl_step_flops: counts must be >= 0, got parameters={parameters}, "
                         f"prompt_tokens={prompt_tokens}, completion_tokens={completion_tokens}")
    tokens = prompt_tokens + completion_tokens
    per_token = (4.0 if lora else 6.0) + (FORWARD_FLOPS_PER_PARAM if checkpointing else 0.0)
    return StepFlops(sample=FORWARD_FLOPS_PER_PARAM * parameters * tokens, train=per_token * parameters * tokens)
