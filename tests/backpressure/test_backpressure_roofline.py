"""The roofline hint with both peaks (seed 003): FLOPs and bytes per token from the model's shapes, the
arithmetic intensity against the ridge point, its place in the regime precedence (spec 4.2), and the
metrics of a run that sets `peak_bw_gb_s`."""

from __future__ import annotations

import pytest

from retrain_ray.backpressure.usl import (
    ModelShapes,
    USLController,
    bytes_per_token,
    flops_per_token,
    roofline_point,
)

LORA = ModelShapes(parameters=1000, trainable=100, bytes_per_param=2, kv_bytes_per_token=64, full=False)
FULL = ModelShapes(parameters=1000, trainable=1000, bytes_per_param=2, kv_bytes_per_token=64, full=True)


def test_flops_per_token_counts_sampling_and_training_lora_or_full():
    assert flops_per_token(LORA) == 2 * 1000 + 4 * 1000 + 6 * 100  # 6600: no weight gradients of frozen weights
    assert flops_per_token(FULL) == 2 * 1000 + 6 * 1000  # 8000


def test_bytes_per_token_amortise_the_weights_over_the_batch():
    # weights 2000 B / p=4, KV 64 B x L=10 / 2, training (3 x 2000 + 28 x trainable) / (p x L)
    assert bytes_per_token(LORA, 4, 10) == 500 + 320 + (6000 + 2800) / 40  # 1040
    assert bytes_per_token(FULL, 4, 10) == 500 + 320 + (6000 + 28000) / 40  # 1670
    assert bytes_per_token(LORA, 64, 10) == 31.25 + 320 + 8800 / 640  # 365


def test_intensity_against_the_ridge_names_the_binding_roof():
    low = roofline_point(LORA, p=4, seq_len=10, tokens_per_s=1000.0, peak_gflops=100.0, peak_bw_gb_s=10.0)
    assert low.intensity == pytest.approx(6600 / 1040) and low.ridge == 10.0
    assert low.regime == "memory_bound"
    assert low.achieved_gflops == pytest.approx(1000 * 6600 / 1e9)
    assert low.achieved_gb_s == pytest.approx(1000 * 1040 / 1e9)
    high = roofline_point(LORA, p=64, seq_len=10, tokens_per_s=1000.0, peak_gflops=100.0, peak_bw_gb_s=10.0)
    assert high.intensity == pytest.approx(6600 / 365) and high.regime == "compute_bound"


def _observe(ctl: USLController, bs: int, gs: int, tokens: int, step_time: float = 1.0) -> None:
    ctl.observe(step_time, bs, gs, tokens)


def test_the_controller_labels_by_the_roofline_after_warmup_and_retrograde():
    ctl = USLController(warmup_steps=1, peak_gflops=100.0, peak_bw_gb_s=10.0, shapes=LORA, min_group_size=1)
    _observe(ctl, 1, 4, 40)  # p = 4, L = 10
    assert ctl.regime == "warmup"  # warmup comes first
    _observe(ctl, 1, 4, 40)
    assert ctl.regime == "memory_bound"
    metrics = ctl.recommend().to_metrics()
    assert metrics["bp_regime"] == "memory_bound"
    assert metrics["bp_intensity"] == pytest.approx(6600 / 1040) and metrics["bp_ridge"] == 10.0
    _observe(ctl, 16, 4, 640)  # p = 64, L = 10
    assert ctl.regime == "compute_bound"
    ctl.kappa, ctl.p_star = 0.01, 10.0  # a fitted retrograde curve outranks the roofline (spec 4.2)
    assert ctl._classify(64.0) == "retrograde"


def test_without_the_shapes_or_a_peak_the_roofline_is_off():
    ctl = USLController(warmup_steps=0, peak_gflops=100.0, peak_bw_gb_s=0.0, shapes=LORA)
    _observe(ctl, 1, 4, 40)
    assert "bp_intensity" not in ctl.recommend().to_metrics()


def test_model_shapes_of_the_tiny_model():
    from transformers import AutoConfig, AutoModelForCausalLM

    from retrain_ray.models.flops import model_shapes
    from retrain_ray.models.loading import resolve_model_path

    path = resolve_model_path("builtin:tiny")
    config = AutoConfig.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path)
    n = sum(p.numel() for p in model.parameters())
    rank, targets = 4, ("q_proj", "v_proj")
    lora = sum(rank * (m.in_features + m.out_features) for name, m in model.named_modules()
               if name.rsplit(".", 1)[-1] in targets)
    shapes = model_shapes("builtin:tiny", full=False, lora_rank=rank, target_modules=targets)
    head_dim = config.hidden_size // config.num_attention_heads
    width = 4 if str(config.dtype) in ("float32", "torch.float32") else 2
    assert (shapes.parameters, shapes.trainable) == (n, lora)
    assert shapes.kv_bytes_per_token == 2 * config.num_hidden_layers * config.num_key_value_heads * head_dim * width
    assert model_shapes("builtin:tiny", full=True, lora_rank=rank, target_modules=targets).trainable == n


def test_a_run_with_both_peaks_logs_the_roofline_regime(tmp_path):
    from retrain_ray.config import RetrainConfig
    from retrain_ray.logs import read_stream
    from retrain_ray.run.train import train_run

    cfg = RetrainConfig.model_validate({
        "model": {"model": "builtin:tiny", "lora_rank": 2}, "backend": {"devices": "cpu"},
        "data": {"source": "builtin"}, "algorithm": {"advantage_mode": "grpo", "transform_mode": "none"},
        "reward": {"type": "custom", "custom_module": "operator:lt"},  # rewards that split every group
        "training": {"seed": 1, "max_steps": 2, "batch_size": 2, "group_size": 16, "max_tokens": 4, "save_every": 0},
        "backpressure": {"enabled": True, "warmup_steps": 0, "peak_gflops": 1e6, "peak_bw_gb_s": 1e3},
    })
    train_run(cfg, run_name="roof", run_dir=tmp_path / "run")
    rows = read_stream(tmp_path / "run", "metrics").to_pylist()
    assert rows and {r["bp_regime"] for r in rows} <= {"memory_bound", "compute_bound"}
    assert all(r["bp_ridge"] == 1e3 and r["bp_intensity"] > 0 for r in rows)
