"""The original's local `[backend.options]` that retrain-ray does not act on: each loads with a note saying
why it changes nothing here, at the original's default and at any value that changes no result; a value
that would change what is learned, or one outside the original's range, is refused naming key and fix."""

from __future__ import annotations

import pytest

from retrain_ray.backends.local.inert_options import INERT_OPTIONS
from retrain_ray.config import ConfigError
from retrain_ray.config.build import build_config

LOADS_WITH_A_NOTE: list[tuple[str, object]] = [
    ("train_sft_microbatch_token_budget", 0), ("train_sft_microbatch_token_budget", 4096),
    ("train_logprob_chunk_size", 0), ("train_logprob_chunk_size", 256),
    ("liger_kernel", True), ("liger_kernel", False),
    ("liger_fused_linear_ce", True), ("liger_fused_linear_ce", False),
    ("cuda_empty_cache", True), ("cuda_empty_cache", False),
    ("cuda_expandable_segments", "auto"), ("cuda_expandable_segments", "true"),
    ("sample_use_cache", True), ("sample_use_cache", False),
    ("gradient_checkpointing_skip_last_n", 0), ("gradient_checkpointing_skip_last_n", 2),
    ("train_selective_suffix_logits", False), ("train_selective_suffix_logits", True),
    ("train_save_on_cpu", False), ("train_save_on_cpu", True),
    ("train_save_on_cpu_pin_memory", True), ("train_save_on_cpu_pin_memory", False),
    ("train_save_on_cpu_min_numel", 0), ("train_save_on_cpu_min_numel", 1024),
    ("train_supervised_context_tokens", 0),
    ("train_unsloth_fused_ce", "off"), ("train_unsloth_fused_ce", "auto"),
    ("train_unsloth_fused_ce_target_gb", 0.0), ("train_unsloth_fused_ce_target_gb", 2.5),
    ("train_unsloth_fused_ce_torch_compile", True),
    ("train_compile_selective_ce", "off"), ("train_compile_selective_ce", "require"),
    ("train_compile_selective_ce_min_tokens", 128), ("train_compile_selective_ce_min_tokens", 64),
    ("lora_detach_input", False),
    ("lora_fast_linear", False), ("lora_fast_linear", True),
    ("qwen35_gated_delta_kernel", "auto"), ("qwen35_gated_delta_kernel", "flash_qla"),
    ("sample_kv_quantization", "off"),
    ("sample_oscar_repo", ""), ("sample_oscar_bits", 4), ("sample_oscar_quant_mode", "k-channel"),
    ("sample_oscar_group_size", 0), ("sample_oscar_kv_rotation", "hadamard"), ("sample_oscar_kv_norm", "1"),
    ("sample_oscar_residual_block_size", 128), ("sample_oscar_attn_implementation", "sdpa"),
    ("cudnn_causal_conv1d_shim", False), ("cudnn_causal_conv1d_shim", True),
]

REFUSED: list[tuple[str, object, str]] = [
    ("train_supervised_context_tokens", 8192, "set 0"),
    ("lora_detach_input", True, "set false"),
    ("sample_kv_quantization", "oscar", 'set "off"'),
    ("qwen35_gated_delta_kernel", "triton", '"flash_qla"'),
    ("train_unsloth_fused_ce", "on", '"require"'),
    ("sample_oscar_bits", 3, "default is 2"),
    ("train_logprob_chunk_size", -1, ">= 0"),
    ("liger_kernel", "yes", "default is True"),
]


def test_every_inert_option_is_covered():
    assert {key for key, _ in LOADS_WITH_A_NOTE} == set(INERT_OPTIONS)


@pytest.mark.parametrize(("key", "value"), LOADS_WITH_A_NOTE)
def test_an_inert_option_loads_with_a_note_saying_why(key, value):
    _, warnings = build_config({"backend": {"options": {key: value}}})
    notes = [w for w in warnings if w.startswith(f"backend.options.{key} = ")]
    assert len(notes) == 1, warnings
    assert "has no effect here: " in notes[0]
    assert notes[0].split("has no effect here: ")[1] == INERT_OPTIONS[key].why


@pytest.mark.parametrize(("key", "value", "fix"), REFUSED)
def test_a_value_that_would_change_the_result_is_refused_naming_key_value_and_fix(key, value, fix):
    with pytest.raises(ConfigError) as info:
        build_config({"backend": {"options": {key: value}}})
    assert info.value.locations == [f"backend.options.{key}"]
    assert repr(value) in str(info.value) and fix in str(info.value)


def test_acting_options_get_no_note():
    _, warnings = build_config({"backend": {"options": {"train_microbatch_size": 2, "lora_freeze_a": True}}})
    assert not [w for w in warnings if w.startswith("backend.options.")]


def test_a_plugin_backend_options_get_no_note():
    from retrain_ray.backends.registry import option_notes

    assert option_notes("tinker", {}) == []
