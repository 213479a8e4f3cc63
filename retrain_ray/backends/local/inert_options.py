"""The original's local options that retrain-ray's local backend does not act on, and what each value means
here.

The original's CUDA backend has memory and speed switches (Liger kernels, activation offload, fused
cross-entropy, cache flushing...) that retrain-ray does not have. A file ported from the original sets them,
often to the original's own defaults (`liger_kernel = true`, `cuda_empty_cache = true`), so such a value
loads with a one-line note saying why it changes nothing here (`inert_note`). Only a value that would change
what is learned and that retrain-ray cannot honour is refused (`inert_issue`): a shorter supervised context,
LoRA inputs detached from the graph, a quantized KV cache while sampling.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


def _never(_value: object) -> bool:
    return False


@dataclass(frozen=True)
class InertOption:
    """One original option the local backend does not act on."""

    default: object
    """The original's default (also this schema's)."""
    why: str
    """Why a value changes nothing here (the note)."""
    choices: tuple[object, ...] = ()
    """The original's accepted values, when it restricts them."""
    changes_result: Callable[[object], bool] = _never
    """True for a value that would change what is learned (refused)."""
    refusal: str = ""
    """Why such a value cannot be honoured, and the fix."""


_KERNEL = "retrain-ray's local backend has no such kernel; in the original it changes speed and memory, not results"
_OFFLOAD = "activations are not offloaded to CPU here (it trades memory for speed, not results)"
_OSCAR = 'read only with sample_kv_quantization = "oscar", which retrain-ray does not have'


def _positive(value: object) -> bool:
    return isinstance(value, int) and value > 0


def _true(value: object) -> bool:
    return value is True


def _not_off(value: object) -> bool:
    return value != "off"


INERT_OPTIONS: dict[str, InertOption] = {
    "train_sft_microbatch_token_budget": InertOption(
        0, "SFT micro-batches are sized by train_microbatch_size only (micro-batching changes memory, not the "
           "summed gradient)"),
    "train_logprob_chunk_size": InertOption(0, "log-probs are computed in one pass per micro-batch (chunking "
                                               "changes memory, not the values)"),
    "liger_kernel": InertOption(True, _KERNEL),
    "liger_fused_linear_ce": InertOption(True, _KERNEL),
    "cuda_empty_cache": InertOption(True, "the CUDA cache is not emptied between steps (it frees memory, it "
                                          "changes no value)"),
    "cuda_expandable_segments": InertOption(
        "auto", "PYTORCH_CUDA_ALLOC_CONF is left as the environment sets it (set it there for expandable "
                "segments; allocation changes no value)"),
    "sample_use_cache": InertOption(True, "sampling always decodes with a KV cache (the same tokens, faster)"),
    "gradient_checkpointing_skip_last_n": InertOption(
        0, "gradient checkpointing covers every layer it is on for (recompute changes speed, not gradients)"),
    "train_selective_suffix_logits": InertOption(
        False, "the LM head runs over the whole row; the original's selective path gives the same log-probs "
               "with less memory"),
    "train_save_on_cpu": InertOption(False, _OFFLOAD),
    "train_save_on_cpu_pin_memory": InertOption(True, _OFFLOAD),
    "train_save_on_cpu_min_numel": InertOption(0, _OFFLOAD),
    "train_supervised_context_tokens": InertOption(
        0, "the whole row is trained on (0: no supervised context window)", changes_result=_positive,
        refusal="a supervised context window trains on a cropped row, a different gradient retrain-ray does "
                "not compute; remove it or set 0 (the full context)"),
    "train_unsloth_fused_ce": InertOption("off", _KERNEL, choices=("off", "auto", "require")),
    "train_unsloth_fused_ce_target_gb": InertOption(0.0, _KERNEL),
    "train_unsloth_fused_ce_torch_compile": InertOption(True, _KERNEL),
    "train_compile_selective_ce": InertOption("off", _KERNEL, choices=("off", "auto", "require")),
    "train_compile_selective_ce_min_tokens": InertOption(128, _KERNEL),
    "lora_detach_input": InertOption(
        False, "LoRA inputs stay in the autograd graph (false is what retrain-ray does)", changes_result=_true,
        refusal="detached LoRA inputs stop gradients through the adapters' inputs, which retrain-ray's LoRA "
                "layers do not do; remove it or set false"),
    "lora_fast_linear": InertOption(False, "retrain-ray's LoRA layers have no fused linear (it changes speed, "
                                           "not results)"),
    "qwen35_gated_delta_kernel": InertOption(
        "auto", "models run with their own attention implementation (the kernel changes speed, not results)",
        choices=("auto", "off", "torch", "flash_qla")),
    "sample_kv_quantization": InertOption(
        "off", "the KV cache is not quantized (off is what retrain-ray does)", choices=("off", "oscar"),
        changes_result=_not_off,
        refusal="a quantized KV cache changes the sampled tokens and retrain-ray has no OSCAR quantizer; "
                'remove it or set "off"'),
    "sample_oscar_repo": InertOption("", _OSCAR),
    "sample_oscar_bits": InertOption(2, _OSCAR, choices=(2, 4)),
    "sample_oscar_quant_mode": InertOption("k-channel", _OSCAR),
    "sample_oscar_group_size": InertOption(0, _OSCAR),
    "sample_oscar_kv_rotation": InertOption("hadamard", _OSCAR),
    "sample_oscar_kv_norm": InertOption("1", _OSCAR),
    "sample_oscar_residual_block_size": InertOption(128, _OSCAR),
    "sample_oscar_attn_implementation": InertOption("sdpa", _OSCAR),
    "cudnn_causal_conv1d_shim": InertOption(False, _KERNEL),
}
"""The original's local options (its 0.3.0 schema) the local backend does not act on, by name."""


def _toml(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return f'"{value}"' if isinstance(value, str) else repr(value)


def inert_problem(key: str, value: object) -> tuple[str, str] | None:
    """(message, fix) when `value` of an inert option is out of the original's range or would change the
    result; None when it loads (with a note)."""
    option = INERT_OPTIONS[key]
    if option.choices and value not in option.choices:
        return (f"must be one of {', '.join(_toml(c) for c in option.choices)}",
                f"the original's default is {_toml(option.default)}")
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0:
        return "must be >= 0", f"the original's default is {_toml(option.default)}"
    if option.changes_result(value):
        message, _, fix = option.refusal.partition("; ")
        return f"not implemented: {message}", fix
    return None


def inert_note(key: str, value: object) -> str:
    """The one-line note for an inert option that loads."""
    return f"backend.options.{key} = {_toml(value)} has no effect here: {INERT_OPTIONS[key].why}"
