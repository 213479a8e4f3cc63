"""Loading a model folder without transformers: the lean Llama and the light tokenizer.

The lean path (models/lean_support.py says which folders take it) loads a Hugging Face Llama folder, the
built-in models' (`builtin:...`, which `models/tokenizer.py` writes) and real checkpoints alike (SmolLM2,
any Llama whose config.json the lean model reproduces; one safetensors file or shards, fp32, bf16 or
fp16 weights), into the lean Llama, under transformers' parameter names; LoRA on it is the torch-only lean
LoRA (models/lean_lora.py: PEFT's computation, init, names and adapter files). The tokenizer is the light
one (models/light_tokenizer.py, chat template included) where it reproduces the folder's, else
transformers'. A built-in folder itself is still built by transformers the first time its name is used
(once per cache: it fixes the weights' values).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from safetensors.torch import load_file  # pyright: ignore[reportUnknownVariableType]
from torch import nn

from retrain_ray.models.lean_llama import GenerationSettings, LeanLlamaConfig, LeanLlamaForCausalLM
from retrain_ray.models.lean_support import lean_config_problem, rope_settings, weight_files
from retrain_ray.models.light_tokenizer import LightTokenizer, light_tokenizer_problem
from retrain_ray.models.loading import resolve_dtype, resolve_model_path

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


def read_config(folder: Path) -> LeanLlamaConfig:
    raw = json.loads((folder / "config.json").read_text())
    problem = lean_config_problem(raw)
    if problem is not None:
        raise ValueError(f"model folder {folder}: {problem}; load it with transformers")
    heads = int(raw["num_attention_heads"])
    rope = rope_settings(raw)
    return LeanLlamaConfig(
        vocab_size=int(raw["vocab_size"]), hidden_size=int(raw["hidden_size"]),
        intermediate_size=int(raw["intermediate_size"]), num_hidden_layers=int(raw["num_hidden_layers"]),
        num_attention_heads=heads, num_key_value_heads=int(raw.get("num_key_value_heads") or heads),
        head_dim=int(raw.get("head_dim") or int(raw["hidden_size"]) // heads),
        rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)),
        rope_theta=float(rope.get("rope_theta", raw.get("rope_theta", 10000.0))),
        tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),  # LlamaConfig's default
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


@contextmanager
def _no_weight_init() -> Iterator[None]:
    """Linear and Embedding layers built without drawing their initial weights (left uninitialised), as
    transformers' `no_init_weights` does: a 135M model's init costs about a second of CPU, and the weights
    are replaced by the checkpoint's. (Building on the meta device instead imports torch._dynamo: seconds.)"""
    saved = nn.Linear.reset_parameters, nn.Embedding.reset_parameters
    nn.Linear.reset_parameters = nn.Embedding.reset_parameters = _skip  # pyright: ignore[reportAttributeAccessIssue]
    try:
        yield
    finally:
        nn.Linear.reset_parameters, nn.Embedding.reset_parameters = saved


def _skip(_module: nn.Module) -> None:
    return None


def load_lean_model(folder: str | Path, *, dtype: torch.dtype = torch.float32) -> LeanLlamaForCausalLM:
    """The lean Llama of a model folder, weights read from its safetensors file(s) (no random init)."""
    folder = Path(folder)
    config = read_config(folder)
    files = weight_files(folder)
    absent = [p.name for p in files if not p.is_file()]
    if absent:
        raise FileNotFoundError(f"model folder {folder} lacks {absent[:3]} (.bin weights load with transformers)")
    with torch.random.fork_rng(devices=[]), _no_weight_init():  # every weight is assigned below
        model = LeanLlamaForCausalLM(config, read_generation(folder, config))
    state: dict[str, torch.Tensor] = {}
    for path in files:
        state.update(load_file(str(path)))
    expected = set(model.state_dict())
    if config.tie_word_embeddings:
        state.pop("lm_head.weight", None)
        expected.discard("lm_head.weight")
    missing, unexpected = sorted(expected - set(state)), sorted(set(state) - expected)
    if missing or unexpected:
        raise KeyError(f"the weights in {folder} do not match a Llama of its config.json: missing "
                       f"{missing[:3]}, unexpected {unexpected[:3]}")
    state = {name: tensor.to(dtype) for name, tensor in state.items()}
    model.load_state_dict(state, strict=False, assign=True)  # the loaded tensors become the parameters
    model.tie_weights()
    model.name_or_path = str(folder)
    return model


def load_lean_model_and_tokenizer(
    name_or_path: str | Path, *, cache_dir: str | Path | None = None, dtype: str | torch.dtype = "auto",
) -> tuple[LeanLlamaForCausalLM, LightTokenizer | PreTrainedTokenizerBase]:
    """`load_model_and_tokenizer` on the lean path, on the CPU (the tokenizer pads on the left)."""
    path = resolve_model_path(name_or_path, cache_dir)
    model = load_lean_model(path, dtype=resolve_dtype(dtype, torch.device("cpu")))
    return model, tokenizer_of(path)


def tokenizer_of(folder: Path) -> LightTokenizer | PreTrainedTokenizerBase:
    """The light tokenizer where it reproduces the folder's, else transformers' (padding on the left)."""
    if light_tokenizer_problem(folder) is None:
        return LightTokenizer.from_folder(folder, padding_side="left")
    # deferred: transformers costs seconds of imports that the light tokenizer above never needs
    from retrain_ray.models.loading import load_tokenizer

    return load_tokenizer(folder)
