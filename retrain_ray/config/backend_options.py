"""Per-backend schemas of `[backend.options]` (spec 1.6 / 7): known keys, their defaults and types.

Unknown keys are an error with a did-you-mean hint. The original's tinker schema is empty; ours is
in `config/tinker_options.py` (client, retries, timeouts; the tinker backend parses them there), so
its keys and value checks are taken from there.
A dotted-path plugin backend gets its options unchecked.
The local schema keeps the original's names so its files load; the local backend reads the ones it
implements through `resolved_options`, and the others are refused unless set to what retrain-ray does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from retrain_ray.config.components import backend_spec
from retrain_ray.config.errors import ConfigIssue, did_you_mean
from retrain_ray.config.prime_rl_options import PRIME_RL_OPTION_DEFAULTS, parse_prime_rl_options
from retrain_ray.config.tinker_options import TINKER_OPTION_DEFAULTS, parse_tinker_options

LOCAL_OPTIONS: dict[str, Any] = {
    # acted on by the local backend (backends/local/policy.py: settings_from_config)
    "train_microbatch_size": 0,
    # "auto": on when the model trains on a GPU, off on CPU (issue 13: there it only trades a recompute,
    # about a fifth of a tiny-model step, for host memory; results are identical either way)
    "gradient_checkpointing": "auto",
    "gradient_checkpointing_use_reentrant": "auto",
    "lora_target_modules": "",
    "lora_layers_to_transform": "",
    "lora_layers_pattern": "layers",
    "lora_freeze_a": False,
    "trust_remote_code": False,
    "strict_deterministic": False,
    # accepted only at the value that describes what retrain-ray does (LOCAL_FIXED)
    "train_sft_microbatch_token_budget": 0,
    "train_logprob_chunk_size": 0,
    "liger_kernel": False,
    "liger_fused_linear_ce": False,
    "cuda_empty_cache": False,
    "cuda_expandable_segments": "auto",
    "sample_use_cache": True,
    "gradient_checkpointing_skip_last_n": 0,
    "train_selective_suffix_logits": False,
    "train_save_on_cpu": False,
    "train_save_on_cpu_pin_memory": True,
    "train_save_on_cpu_min_numel": 0,
    "train_supervised_context_tokens": 0,
    "train_unsloth_fused_ce": "off",
    "train_compile_selective_ce": "off",
    "train_compile_selective_ce_min_tokens": 128,
    "lora_detach_input": False,
    "lora_fast_linear": False,
    "qwen35_gated_delta_kernel": "auto",
    "sample_kv_quantization": "off",
    "cudnn_causal_conv1d_shim": False,
}
"""The original's local options. The first group acts; the rest are memory/speed kernels of the
original's CUDA backend that retrain-ray does not have: each accepts only the value that says what
retrain-ray does (its default here; for liger_kernel, liger_fused_linear_ce and cuda_empty_cache that
is `false`, where the original defaults to `true`) and any other value is refused with `LOCAL_FIXED`'s
reason. None of them changes what is learned, only speed and memory."""

_KERNEL = "retrain-ray's local backend has no such kernel (it changes speed/memory, not results)"
LOCAL_FIXED: dict[str, str] = {
    "train_sft_microbatch_token_budget": "SFT micro-batches are sized by train_microbatch_size only",
    "train_logprob_chunk_size": "log-probs are computed in one pass per micro-batch",
    "liger_kernel": _KERNEL,
    "liger_fused_linear_ce": _KERNEL,
    "cuda_empty_cache": "the CUDA cache is not emptied between steps",
    "cuda_expandable_segments": "PYTORCH_CUDA_ALLOC_CONF is left as the environment sets it",
    "sample_use_cache": "the PyTorch engine always decodes with a KV cache",
    "gradient_checkpointing_skip_last_n": "gradient checkpointing covers every layer",
    "train_selective_suffix_logits": _KERNEL,
    "train_save_on_cpu": "activations are not offloaded to CPU",
    "train_save_on_cpu_pin_memory": "activations are not offloaded to CPU",
    "train_save_on_cpu_min_numel": "activations are not offloaded to CPU",
    "train_supervised_context_tokens": "the whole sequence is scored",
    "train_unsloth_fused_ce": _KERNEL,
    "train_compile_selective_ce": _KERNEL,
    "train_compile_selective_ce_min_tokens": _KERNEL,
    "lora_detach_input": "LoRA layers are PEFT's own",
    "lora_fast_linear": "LoRA layers are PEFT's own",
    "qwen35_gated_delta_kernel": "models run with transformers' own kernels",
    "sample_kv_quantization": "the KV cache is not quantized",
    "cudnn_causal_conv1d_shim": _KERNEL,
}
USE_REENTRANT_CHOICES = ("auto", "true", "false")


def _tinker_schema() -> dict[str, Any]:
    return dict(TINKER_OPTION_DEFAULTS)


def _tinker_values(options: dict[str, Any]) -> list[ConfigIssue]:
    try:
        parse_tinker_options(options)
    except (ValueError, TypeError) as exc:
        return [ConfigIssue("backend.options", options, str(exc), "see the tinker backend's option list")]
    return []


def _prime_rl_values(options: dict[str, Any]) -> list[ConfigIssue]:
    try:
        parse_prime_rl_options(options)
    except (ValueError, TypeError) as exc:
        return [ConfigIssue("backend.options", options, str(exc),
                            "see the prime_rl backend's options in docs/configuration.md")]
    return []


BOOL_OR_AUTO = frozenset({"gradient_checkpointing"})
"""Local options that take true, false or "auto"."""


@dataclass(frozen=True)
class OptionsTable:
    """How one built-in backend's `[backend.options]` are checked (its spec's `options` names it)."""

    schema: Callable[[dict[str, Any]], dict[str, Any]]
    """Known keys and their defaults, given the options set."""
    bool_or_auto: frozenset[str] = frozenset()
    """Keys that take true, false or "auto"."""
    key_issues: Callable[[str, Any], list[ConfigIssue]] | None = None
    """A well-typed key's value check."""
    value_issues: Callable[[dict[str, Any]], list[ConfigIssue]] | None = None
    """The backend's own parser of all its options, once every key is known and well typed."""


def _local_value(key: str, value: Any) -> list[ConfigIssue]:
    loc = f"backend.options.{key}"
    if key in LOCAL_FIXED and value != LOCAL_OPTIONS[key]:
        return [ConfigIssue(loc, value, f"not implemented: {LOCAL_FIXED[key]}",
                            f"remove it or set {LOCAL_OPTIONS[key]!r}")]
    if key == "gradient_checkpointing_use_reentrant" and str(value).lower() not in USE_REENTRANT_CHOICES:
        return [ConfigIssue(loc, value, "must be auto, true or false", "default is 'auto'")]
    if key == "lora_layers_to_transform" and not all(p.strip().isdigit() for p in value.split(",") if p.strip()):
        return [ConfigIssue(loc, value, "must be a comma list of layer indices", 'e.g. "0,1,2"')]
    return []


OPTION_TABLES: dict[str, OptionsTable] = {
    "local": OptionsTable(lambda options: LOCAL_OPTIONS, bool_or_auto=BOOL_OR_AUTO, key_issues=_local_value),
    # the original's tinker schema is empty: no options, no keys
    "tinker": OptionsTable(lambda options: _tinker_schema() if options else {}, value_issues=_tinker_values),
    "prime_rl": OptionsTable(lambda options: dict(PRIME_RL_OPTION_DEFAULTS), value_issues=_prime_rl_values),
}


def _table(backend: str) -> OptionsTable | None:
    return OPTION_TABLES.get(backend_spec(backend).options)


def schema_for(backend: str, options: dict[str, Any]) -> dict[str, Any] | None:
    """Known options and defaults of a built-in backend; None for plugins (unchecked)."""
    table = _table(backend)
    return table.schema(options) if table is not None else None


def _type_ok(value: Any, default: Any, bool_or_auto: bool = False) -> bool:
    if bool_or_auto:
        return isinstance(value, bool) or value == "auto"
    if isinstance(default, bool):
        return isinstance(value, bool)
    if isinstance(default, int):
        return isinstance(value, int) and not isinstance(value, bool)
    if isinstance(default, float):
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, type(default))


def check_options(backend: str, options: dict[str, Any]) -> list[ConfigIssue]:
    """Issues for unknown or mistyped `[backend.options]` keys of a built-in backend."""
    table = _table(backend)
    if table is None:
        return []
    schema = table.schema(options)
    issues: list[ConfigIssue] = []
    for key, value in options.items():
        loc = f"backend.options.{key}"
        if key not in schema:
            if not schema:
                hint = f"remove it: the {backend} backend takes no [backend.options]"
            else:
                hint = did_you_mean(key, schema) or f"known options: {', '.join(sorted(schema))}"
            issues.append(ConfigIssue(loc, value, f"unknown option for backend {backend!r}", hint))
        elif not _type_ok(value, schema[key], key in table.bool_or_auto):
            kind = "bool or \"auto\"" if key in table.bool_or_auto else type(schema[key]).__name__
            issues.append(ConfigIssue(loc, value, f"expected a {kind}", f"default is {schema[key]!r}"))
        elif table.key_issues is not None:
            issues += table.key_issues(key, value)
    if table.value_issues is not None and options and not issues:
        issues += table.value_issues(options)
    return issues


def resolved_options(backend: str, options: dict[str, Any]) -> dict[str, Any]:
    """The backend's options with schema defaults filled in."""
    return {**(schema_for(backend, options) or {}), **options}
