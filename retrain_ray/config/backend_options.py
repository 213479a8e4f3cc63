"""Per-backend schemas of `[backend.options]` (spec 1.6 / 7): known keys, their defaults and types.

Unknown keys are an error with a did-you-mean hint. The original's tinker schema is empty; ours is
owned by the tinker backend (`retrain_ray.backends.tinker.options`: client, retries, timeouts), so
its keys and value checks are taken from there, imported only when a tinker config has options.
A dotted-path plugin backend gets its options unchecked.
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
SCHEMAS: dict[str, dict[str, Any]] = {"local": LOCAL_OPTIONS}


def _tinker_schema() -> dict[str, Any]:
    from retrain_ray.backends.tinker.options import TINKER_OPTION_DEFAULTS

    return dict(TINKER_OPTION_DEFAULTS)


def _tinker_values(options: dict[str, Any]) -> list[ConfigIssue]:
    from retrain_ray.backends.tinker.options import parse_tinker_options

    try:
        parse_tinker_options(options)
    except (ValueError, TypeError) as exc:
        return [ConfigIssue("backend.options", options, str(exc), "see the tinker backend's option list")]
    return []


def schema_for(backend: str, options: dict[str, Any]) -> dict[str, Any] | None:
    """Known options and defaults of a built-in backend; None for plugins (unchecked)."""
    if backend == "tinker":
        return _tinker_schema() if options else {}
    return SCHEMAS.get(backend)


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
    schema = schema_for(backend, options)
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
    if backend == "tinker" and options and not issues:
        issues += _tinker_values(options)
    return issues


def resolved_options(backend: str, options: dict[str, Any]) -> dict[str, Any]:
    """The backend's options with schema defaults filled in."""
    return {**(schema_for(backend, options) or {}), **options}
