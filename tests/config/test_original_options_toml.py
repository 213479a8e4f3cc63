"""A `[backend.options]` table as the original writes it (its 0.3.0 local schema, every key at the original's
default) loads here with no error, and each key retrain-ray does not act on says so in one note."""

from __future__ import annotations

from pathlib import Path

from retrain_ray.config import load_config_with_warnings

ORIGINAL_LOCAL_OPTIONS_TOML = """\
[backend]
backend = "local"

[backend.options]
train_microbatch_size = 0
train_sft_microbatch_token_budget = 0
train_logprob_chunk_size = 0
liger_kernel = true
liger_fused_linear_ce = true
cuda_empty_cache = true
cuda_expandable_segments = "auto"
strict_deterministic = false
sample_use_cache = true
sample_kv_quantization = "off"
sample_oscar_repo = ""
sample_oscar_bits = 2
sample_oscar_quant_mode = "k-channel"
sample_oscar_group_size = 0
sample_oscar_kv_rotation = "hadamard"
sample_oscar_kv_norm = "1"
sample_oscar_residual_block_size = 128
sample_oscar_attn_implementation = "sdpa"
gradient_checkpointing = true
gradient_checkpointing_use_reentrant = "auto"
gradient_checkpointing_skip_last_n = 0
cudnn_causal_conv1d_shim = false
qwen35_gated_delta_kernel = "auto"
train_selective_suffix_logits = false
train_save_on_cpu = false
train_save_on_cpu_pin_memory = true
train_save_on_cpu_min_numel = 0
train_supervised_context_tokens = 0
train_unsloth_fused_ce = "off"
train_unsloth_fused_ce_target_gb = 0.0
train_unsloth_fused_ce_torch_compile = true
train_compile_selective_ce = "off"
train_compile_selective_ce_min_tokens = 128
lora_target_modules = ""
lora_layers_to_transform = ""
lora_layers_pattern = "layers"
lora_detach_input = false
lora_fast_linear = false
lora_freeze_a = false
trust_remote_code = false
"""
"""The original's local option schema with its defaults (spec 7, "Backend options"), as its files hold it."""

ACTING = {"train_microbatch_size", "strict_deterministic", "gradient_checkpointing",
          "gradient_checkpointing_use_reentrant", "lora_target_modules", "lora_layers_to_transform",
          "lora_layers_pattern", "lora_freeze_a", "trust_remote_code"}


def test_the_originals_default_options_load_with_one_note_per_inert_key(tmp_path: Path):
    path = tmp_path / "original.toml"
    path.write_text(ORIGINAL_LOCAL_OPTIONS_TOML)
    cfg, warnings = load_config_with_warnings(path)
    assert cfg.backend.options["liger_kernel"] is True
    noted = {w.split(" = ")[0].removeprefix("backend.options.") for w in warnings if "has no effect here" in w}
    assert noted == set(cfg.backend.options) - ACTING
    assert len(noted) == 31
