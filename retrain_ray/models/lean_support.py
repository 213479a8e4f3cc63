"""Which model folders the torch-only lean Llama reproduces, read from their files alone (no torch).

The lean Llama (models/lean_llama.py) computes transformers' `LlamaForCausalLM`: SiLU MLP, default RoPE,
RMSNorm, no biases, grouped-query attention, tied or untied embeddings, any head dim. A folder takes the
lean path when its `config.json` asks for nothing else and its weights are safetensors (one file or shards
listed in `model.safetensors.index.json`); anything else (another architecture, RoPE scaling such as
Llama 3.1's, biases, `.bin` weights, `trust_remote_code`) loads through transformers, and `lean_problem`
says why, which the loader logs.

`[backend.options] model_impl` picks: "auto" (default: lean wherever it reproduces the model), "lean"
(an error naming the reason where it cannot) or "transformers" (always transformers and PEFT).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

WEIGHTS_FILE = "model.safetensors"
WEIGHTS_INDEX = "model.safetensors.index.json"
MODEL_IMPLS = ("auto", "lean", "transformers")

# config.json values the lean model reproduces; a missing key takes transformers' LlamaConfig default,
# which is the value named here
_REQUIRED: dict[str, object] = {"model_type": "llama", "hidden_act": "silu", "attention_bias": False,
                                "mlp_bias": False, "attention_dropout": 0.0, "pretraining_tp": 1}


def rope_settings(raw: dict[str, Any]) -> dict[str, Any]:
    """RoPE settings under either transformers name: `rope_parameters` (5.x) or `rope_scaling` (4.x)."""
    rope = raw.get("rope_parameters") or raw.get("rope_scaling") or {}
    return dict(rope) if isinstance(rope, dict) else {}


def lean_config_problem(raw: dict[str, Any]) -> str | None:
    """Why a config.json needs transformers' model, or None."""
    for key, value in _REQUIRED.items():
        if raw.get(key, value) != value:
            return f"config.json has {key} = {raw.get(key)!r} (the lean Llama does {value!r})"
    rope = rope_settings(raw)
    if rope.get("rope_type", rope.get("type", "default")) != "default":
        return f"config.json asks for RoPE {rope!r} (the lean Llama does the default RoPE)"
    heads, kv_heads = raw.get("num_attention_heads"), raw.get("num_key_value_heads") or raw.get("num_attention_heads")
    if not isinstance(heads, int) or not isinstance(kv_heads, int) or heads % kv_heads:
        return f"config.json has {heads!r} attention heads over {kv_heads!r} key/value heads"
    return None


def weight_files(folder: Path) -> list[Path]:
    """The folder's safetensors files: the one `model.safetensors` or the shards its index lists."""
    index = folder / WEIGHTS_INDEX
    if index.is_file():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        return [folder / shard for shard in shards]
    return [folder / WEIGHTS_FILE]


def lean_problem(folder: str | Path) -> str | None:
    """Why the lean Llama cannot load this model folder (config or weight files), or None."""
    folder = Path(folder)
    try:
        raw: Any = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError) as exc:
        return f"its config.json cannot be read ({type(exc).__name__})"
    if not isinstance(raw, dict):
        return "its config.json is not a table"
    problem = lean_config_problem(raw)  # pyright: ignore[reportUnknownArgumentType]
    if problem is not None:
        return problem
    try:
        missing = [p.name for p in weight_files(folder) if not p.is_file()]
    except (OSError, ValueError, KeyError) as exc:
        return f"its {WEIGHTS_INDEX} cannot be read ({type(exc).__name__})"
    if missing:
        return f"it has no safetensors weights ({', '.join(missing[:3])} missing; .bin weights load with transformers)"
    return None


def model_impl_problem(value: object) -> str | None:
    """Why a `[backend.options] model_impl` value is refused, or None."""
    return None if value in MODEL_IMPLS else f"must be one of {', '.join(MODEL_IMPLS)}"


def takes_lean_path(name: str | Path, folder: Path, *, trust_remote_code: bool = False,
                    model_impl: str = "auto") -> bool:
    """Whether the resolved folder of model `name` loads on the lean path; logs why where "auto" falls back
    to transformers, raises where `model_impl = "lean"` asks for what the lean model cannot do."""
    if model_impl == "transformers":
        return False
    problem = "it runs the repository's own code (trust_remote_code)" if trust_remote_code else lean_problem(folder)
    if problem is None:
        return True
    if model_impl == "lean":
        raise ValueError(f"model {str(name)!r}: [backend.options] model_impl = \"lean\", but the lean Llama "
                         f"cannot load it: {problem}; set model_impl = \"auto\" or \"transformers\"")
    log.info("model %r loads through transformers and PEFT, not the lean Llama: %s", str(name), problem)
    return False
