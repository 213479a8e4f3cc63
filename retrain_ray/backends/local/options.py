"""The built-in local backend (PyTorch/PEFT in the run's process or a Ray worker): its spec, capabilities
and `[backend.options]` schema.

The local schema keeps the original's names so its files load; the local backend reads the ones it
implements through `resolved_options`, and the others are refused unless set to what retrain-ray does.
The policy is built by the run's engine's factory (engines/registry.py) on the local trainer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from retrain_ray.config.errors import ConfigIssue

from retrain_ray.backends.types import BackendCapabilities, OptionsTable, issue

LOCAL_OPTIONS: dict[str, object] = {
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


BOOL_OR_AUTO = frozenset({"gradient_checkpointing"})
"""Local options that take true, false or "auto"."""


def _local_value(key: str, value: object) -> list[ConfigIssue]:
    loc = f"backend.options.{key}"
    if key in LOCAL_FIXED and value != LOCAL_OPTIONS[key]:
        return [issue(loc, value, f"not implemented: {LOCAL_FIXED[key]}",
                            f"remove it or set {LOCAL_OPTIONS[key]!r}")]
    if key == "gradient_checkpointing_use_reentrant" and str(value).lower() not in USE_REENTRANT_CHOICES:
        return [issue(loc, value, "must be auto, true or false", "default is 'auto'")]
    if key == "lora_layers_to_transform" and not all(p.strip().isdigit() for p in str(value).split(",") if p.strip()):
        return [issue(loc, value, "must be a comma list of layer indices", 'e.g. "0,1,2"')]
    return []


CAPABILITIES = BackendCapabilities(reports_sync_loss=True, preserves_token_advantages=True,
                                   supports_checkpoint_resume=True, resume_runtime_dependent=False,
                                   checkpoint_resume_mode="exact")

OPTIONS = OptionsTable(lambda options: LOCAL_OPTIONS, bool_or_auto=BOOL_OR_AUTO, key_issues=_local_value)
