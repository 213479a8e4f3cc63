"""Loading a built-in model without transformers: the lean Llama and the light tokenizer.

`lean_applies` (models/context.py) says when a run takes this path: a built-in model (`builtin:...`, which
`models/tokenizer.py` writes as a Hugging Face Llama folder), trained in full (`finetune = "full"`) or with
LoRA, which is then the torch-only lean LoRA (models/lean_lora.py: PEFT's computation, init, names and
adapter files, models/lean_lora.py), so neither transformers nor peft is imported. Any other model
(local folder, Hub id, smollm2, `trust_remote_code`) loads through transformers, and LoRA on it is PEFT's. The folder itself is still built by
transformers the first time a built-in name is used (once per cache: it fixes the weights' values).

`load_lean_model_and_tokenizer` checks that the folder's config and weights are what the lean model
computes (a Llama with SiLU, default RoPE, no biases, one safetensors file) and says why not otherwise.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file  # pyright: ignore[reportUnknownVariableType]

from retrain_ray.models.lean_llama import (
    WEIGHTS_FILE,
    GenerationSettings,
    LeanLlamaConfig,
    LeanLlamaForCausalLM,
)
from retrain_ray.models.light_tokenizer import LightTokenizer
from retrain_ray.models.loading import resolve_dtype, resolve_model_path

# config.json values the lean model reproduces (anything else loads through transformers)
_REQUIRED: dict[str, object] = {"model_type": "llama", "hidden_act": "silu", "attention_bias": False,
                                "mlp_bias": False, "attention_dropout": 0.0, "pretraining_tp": 1}


def lean_config_problem(raw: dict[str, Any]) -> str | None:
    """Why a config.json needs transformers' model, or None."""
    for key, value in _REQUIRED.items():
        if raw.get(key, value) != value:
            return f"config.json has {key} = {raw.get(key)!r} (the lean Llama does {value!r})"
    rope = raw.get("rope_parameters") or {"rope_type": "default"}
    if rope.get("rope_type", "default") != "default" or raw.get("rope_scaling"):
        return f"config.json asks for RoPE {rope!r} (the lean Llama does the default RoPE)"
    return None


def read_config(folder: Path) -> LeanLlamaConfig:
    raw = json.loads((folder / "config.json").read_text())
    problem = lean_config_problem(raw)
    if problem is not None:
        raise ValueError(f"model folder {folder}: {problem}; load it with transformers")
    heads = int(raw["num_attention_heads"])
    rope = raw.get("rope_parameters") or {}
    return LeanLlamaConfig(
        vocab_size=int(raw["vocab_size"]), hidden_size=int(raw["hidden_size"]),
        intermediate_size=int(raw["intermediate_size"]), num_hidden_layers=int(raw["num_hidden_layers"]),
        num_attention_heads=heads, num_key_value_heads=int(raw.get("num_key_value_heads") or heads),
        head_dim=int(raw.get("head_dim") or int(raw["hidden_size"]) // heads),
        rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)),
        rope_theta=float(rope.get("rope_theta", raw.get("rope_theta", 10000.0))),
        tie_word_embeddings=bool(raw.get("tie_word_embeddings", True)),
        pad_token_id=raw.get("pad_token_id"), bos_token_id=raw.get("bos_token_id"),
        eos_token_id=raw.get("eos_token_id"), use_cache=bool(raw.get("use_cache", True)), raw=raw,
    )


def read_generation(folder: Path, config: LeanLlamaConfig) -> GenerationSettings:
    path = folder / "generation_config.json"
    raw: dict[str, Any] = json.loads(path.read_text()) if path.is_file() else {}
    return GenerationSettings(
        eos_token_id=raw.get("eos_token_id", config.eos_token_id),
        pad_token_id=raw.get("pad_token_id", config.pad_token_id),
        bos_token_id=raw.get("bos_token_id", config.bos_token_id), raw=raw,
    )


def load_lean_model(folder: str | Path, *, dtype: torch.dtype = torch.float32) -> LeanLlamaForCausalLM:
    """The lean Llama of a model folder, weights read from its model.safetensors (no random init)."""
    folder = Path(folder)
    config = read_config(folder)
    if not (folder / WEIGHTS_FILE).is_file():
        raise FileNotFoundError(f"model folder {folder} has no {WEIGHTS_FILE} (sharded weights load with transformers)")
    # initialised on CPU and overwritten: building under `torch.device("meta")` routes every init through
    # torch's Python reference ops, which import torch._dynamo (seconds); the fork keeps the caller's RNG
    with torch.random.fork_rng(devices=[]):
        model = LeanLlamaForCausalLM(config, read_generation(folder, config))
    state = load_file(str(folder / WEIGHTS_FILE))
    expected = set(model.state_dict())
    if config.tie_word_embeddings:
        state.pop("lm_head.weight", None)
        expected.discard("lm_head.weight")
    missing, unexpected = sorted(expected - set(state)), sorted(set(state) - expected)
    if missing or unexpected:
        raise KeyError(f"{folder / WEIGHTS_FILE} does not match a Llama of its config.json: missing "
                       f"{missing[:3]}, unexpected {unexpected[:3]}")
    model.load_state_dict(state, strict=False)
    model.name_or_path = str(folder)
    return model.to(dtype)


def load_lean_model_and_tokenizer(
    name_or_path: str | Path, *, cache_dir: str | Path | None = None, dtype: str | torch.dtype = "auto",
) -> tuple[LeanLlamaForCausalLM, LightTokenizer]:
    """`load_model_and_tokenizer` for a built-in model on the CPU, without transformers (left padding)."""
    path = resolve_model_path(name_or_path, cache_dir)
    model = load_lean_model(path, dtype=resolve_dtype(dtype, torch.device("cpu")))
    return model, LightTokenizer.from_folder(path, padding_side="left")
