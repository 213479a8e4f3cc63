"""Per-backend schemas of `[backend.options]` (spec 1.6 / 7): known keys, their defaults and types.

Unknown keys are an error with a did-you-mean hint; the remote training API (tinker) takes no
options at all, as in the original. A dotted-path plugin backend gets its options unchecked.
The local schema keeps the original's names so its files load; our local backend reads the ones it
implements through `resolved_options` and ignores the CUDA-only ones on CPU.
"""

from __future__ import annotations

from typing import Any

from retrain_ray.config.errors import ConfigIssue, did_you_mean

LOCAL_OPTIONS: dict[str, Any] = {
    "train_microbatch_size": 0,
    "train_sft_microbatch_token_budget": 0,
    "train_logprob_chunk_size": 0,
    "liger_kernel": True,
    "liger_fused_linear_ce": True,
    "cuda_empty_cache": True,
    "cuda_expandable_segments": "auto",
    "strict_deterministic": False,
    "sample_use_cache": True,
    "gradient_checkpointing": True,
    "gradient_checkpointing_use_reentrant": "auto",
    "gradient_checkpointing_skip_last_n": 0,
    "train_selective_suffix_logits": False,
    "train_save_on_cpu": False,
    "train_save_on_cpu_pin_memory": True,
    "train_save_on_cpu_min_numel": 0,
    "train_supervised_context_tokens": 0,
    "train_unsloth_fused_ce": "off",
    "train_compile_selective_ce": "off",
    "train_compile_selective_ce_min_tokens": 128,
    "lora_target_modules": "",
    "lora_layers_to_transform": "",
    "lora_layers_pattern": "layers",
    "lora_detach_input": False,
    "lora_fast_linear": False,
    "lora_freeze_a": False,
    "qwen35_gated_delta_kernel": "auto",
    "sample_kv_quantization": "off",
    "cudnn_causal_conv1d_shim": False,
    "trust_remote_code": False,
}
SCHEMAS: dict[str, dict[str, Any]] = {"local": LOCAL_OPTIONS, "tinker": {}}


def _type_ok(value: Any, default: Any) -> bool:
    if isinstance(default, bool):
        return isinstance(value, bool)
    if isinstance(default, int):
        return isinstance(value, int) and not isinstance(value, bool)
    if isinstance(default, float):
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, type(default))


def check_options(backend: str, options: dict[str, Any]) -> list[ConfigIssue]:
    """Issues for unknown or mistyped `[backend.options]` keys of a built-in backend."""
    schema = SCHEMAS.get(backend)
    if schema is None:
        return []
    issues = []
    for key, value in options.items():
        loc = f"backend.options.{key}"
        if key not in schema:
            if not schema:
                hint = f"remove it: the {backend} backend takes no [backend.options]"
            else:
                hint = did_you_mean(key, schema) or f"known options: {', '.join(sorted(schema))}"
            issues.append(ConfigIssue(loc, value, f"unknown option for backend {backend!r}", hint))
        elif not _type_ok(value, schema[key]):
            kind = type(schema[key]).__name__
            issues.append(ConfigIssue(loc, value, f"expected a {kind}", f"default is {schema[key]!r}"))
    return issues


def resolved_options(backend: str, options: dict[str, Any]) -> dict[str, Any]:
    """The backend's options with schema defaults filled in."""
    return {**SCHEMAS.get(backend, {}), **options}
