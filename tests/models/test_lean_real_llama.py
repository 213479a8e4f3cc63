"""Real Llama checkpoints on the lean path (models/lean_support.py, lean_loading.py) against transformers.

Default tier: small Llama folders written by transformers itself with what real checkpoints vary (grouped-
query attention, a head dim other than hidden / heads, untied embeddings, rms eps, RoPE theta, bf16
weights in several safetensors shards) load into the lean Llama with transformers' names and give its
logits bit for bit; folders the lean model cannot reproduce (RoPE scaling, biases, .bin weights) are named
with the reason and fall back to transformers, or are refused where `model_impl = "lean"` forces it.
SmolLM2 itself (extended tier: converting it the first time takes a minute) is in test_smollm2_lean.py.
"""

from __future__ import annotations

import json
import logging
import shutil

import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

from retrain_ray.backends.local import PolicySettings, load_trainable_model
from retrain_ray.models.context import lean_applies
from retrain_ray.models.lean_llama import LeanLlamaForCausalLM
from retrain_ray.models.lean_loading import load_lean_model
from retrain_ray.models.lean_lora import LeanLoraModel
from retrain_ray.models.lean_support import lean_problem, takes_lean_path

SHAPES = {"vocab_size": 96, "hidden_size": 48, "intermediate_size": 80, "num_hidden_layers": 2,
          "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "rms_norm_eps": 1e-5,
          "max_position_embeddings": 64}


def _write_llama(folder, *, dtype=torch.float32, shard: str | None = None, **overrides):
    config = LlamaConfig(**{**SHAPES, **overrides})
    config.rope_parameters = {"rope_type": "default", "rope_theta": 500000.0}
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = LlamaForCausalLM(config).to(dtype)
    model.save_pretrained(folder, **({"max_shard_size": shard} if shard else {}))
    return folder


def _inputs():
    ids = torch.randint(3, 96, (3, 10), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[0, :4] = 0
    mask[1, :1] = 0
    return ids, mask, (mask.cumsum(-1) - 1).clamp_min(0)


@pytest.mark.parametrize(("name", "kwargs"), [
    ("tied fp32, one file", {"tie_word_embeddings": True}),
    ("untied bf16, three shards", {"tie_word_embeddings": False, "dtype": torch.bfloat16, "shard": "20KB"}),
    ("no GQA", {"num_key_value_heads": 4}),
])
def test_a_llama_folder_gives_transformers_logits_bit_for_bit(tmp_path, name, kwargs):
    folder = _write_llama(tmp_path / "m", **kwargs)
    if "shard" in kwargs:
        assert (folder / "model.safetensors.index.json").is_file()
    assert lean_problem(folder) is None and lean_applies(str(folder))
    lean = load_lean_model(folder)
    hf = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True, dtype=torch.float32)
    assert [n for n, _ in lean.named_parameters()] == [n for n, _ in hf.named_parameters()]
    assert (lean.lm_head.weight is lean.model.embed_tokens.weight) == bool(kwargs.get("tie_word_embeddings"))
    ids, mask, positions = _inputs()
    with torch.no_grad():
        for attention, pos in [(None, None), (mask, positions)]:
            ours = lean(ids, attention_mask=attention, position_ids=pos).logits
            theirs = hf(ids, attention_mask=attention, position_ids=pos).logits
            assert torch.equal(ours, theirs), name


@pytest.mark.parametrize(("overrides", "reason"), [
    ({"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                       "original_max_position_embeddings": 32, "rope_theta": 500000.0}}, "RoPE"),
    ({"attention_bias": True}, "attention_bias"),
    ({"mlp_bias": True}, "mlp_bias"),
])
def test_what_the_lean_model_cannot_reproduce_is_named(tmp_path, overrides, reason):
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "llama", **SHAPES, **overrides}))
    (folder / "model.safetensors").write_bytes(b"")
    problem = lean_problem(folder)
    assert problem is not None and reason in problem
    assert not lean_applies(str(folder))


def test_bin_weights_and_other_architectures_take_transformers(tmp_path):
    bin_only = tmp_path / "bin"
    bin_only.mkdir()
    (bin_only / "config.json").write_text(json.dumps({"model_type": "llama", **SHAPES}))
    (bin_only / "pytorch_model.bin").write_bytes(b"")
    assert "safetensors" in str(lean_problem(bin_only))
    qwen = tmp_path / "qwen"
    qwen.mkdir()
    (qwen / "config.json").write_text(json.dumps({"model_type": "qwen2", **SHAPES}))
    assert "model_type" in str(lean_problem(qwen))


def _with_tokenizer(folder, tiny_dir):
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tiny_dir / name, folder / name)
    return folder


def test_auto_falls_back_with_a_log_line_and_lean_refuses(tmp_path, caplog, tiny_dir):
    folder = _with_tokenizer(_write_llama(tmp_path / "m", attention_bias=True), tiny_dir)
    with caplog.at_level(logging.INFO, logger="retrain_ray.models.lean_support"):
        assert not takes_lean_path("my-model", folder)
    assert "loads through transformers" in caplog.text and "attention_bias" in caplog.text
    with pytest.raises(ValueError, match=r"model_impl = \"lean\".*attention_bias.*\"transformers\""):
        takes_lean_path("my-model", folder, model_impl="lean")
    model, _ = load_trainable_model(folder, PolicySettings(finetune="full"), device="cpu")
    assert not isinstance(model, LeanLlamaForCausalLM)  # transformers' model, biases and all


def test_model_impl_picks_the_path_for_the_same_folder(tmp_path, tiny_dir):
    folder = _with_tokenizer(_write_llama(tmp_path / "m", tie_word_embeddings=True), tiny_dir)
    lean, _ = load_trainable_model(folder, PolicySettings(finetune="lora"), device="cpu")
    forced, _ = load_trainable_model(folder, PolicySettings(finetune="lora", model_impl="transformers"), device="cpu")
    assert isinstance(lean, LeanLoraModel) and not isinstance(forced, LeanLoraModel)
    assert [n for n, _ in lean.named_parameters()] == [n for n, _ in forced.named_parameters()]
    for (name, a), (_, b) in zip(lean.named_parameters(), forced.named_parameters(), strict=True):
        assert torch.equal(a, b), name  # same base weights and the same seeded LoRA init


def test_logits_to_keep_projects_the_last_positions_as_transformers(tmp_path):
    folder = _write_llama(tmp_path / "m", tie_word_embeddings=True)
    lean = load_lean_model(folder)
    hf = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True, dtype=torch.float32)
    ids, mask, positions = _inputs()
    with torch.no_grad():
        ours = lean(ids, attention_mask=mask, position_ids=positions, logits_to_keep=1).logits
        theirs = hf(ids, attention_mask=mask, position_ids=positions, logits_to_keep=1).logits
        full = lean(ids, attention_mask=mask, position_ids=positions).logits
    assert ours.shape == (3, 1, 96) and torch.equal(ours, theirs)
    assert torch.allclose(ours[:, 0], full[:, -1], atol=1e-6)


def test_a_bad_model_impl_is_refused_naming_the_key_and_the_choices(tmp_path):
    from retrain_ray.config import load_config

    path = tmp_path / "run.toml"
    path.write_text('[model]\nmodel = "builtin:tiny"\n[backend.options]\nmodel_impl = "vllm"\n')
    with pytest.raises(Exception, match=r"(?s)backend\.options\.model_impl.*auto, lean, transformers"):
        load_config(path)
    path.write_text('[model]\nmodel = "builtin:tiny"\n[backend.options]\nmodel_impl = "transformers"\n')
    assert load_config(path).backend.options["model_impl"] == "transformers"


@pytest.mark.parametrize("kwargs", [{"tie_word_embeddings": True}, {"tie_word_embeddings": False,
                                                                     "dtype": torch.bfloat16}])
def test_model_shapes_count_a_lean_llama_as_transformers_does(tmp_path, kwargs):
    """The capacity plan's shapes (models/flops.py) come from the lean model on the meta device, without
    transformers, and equal transformers' own count of the same folder."""
    from retrain_ray.models.flops import model_shapes

    folder = _write_llama(tmp_path / "llama", **kwargs)
    reference = AutoModelForCausalLM.from_pretrained(folder)
    targets = ("q_proj", "v_proj", "down_proj")
    lora = sum(4 * (m.in_features + m.out_features) for name, m in reference.named_modules()
               if name.rsplit(".", 1)[-1] in targets)
    shapes = model_shapes(str(folder), full=False, lora_rank=4, target_modules=targets)
    width = 2 if "dtype" in kwargs else 4
    assert (shapes.parameters, shapes.trainable, shapes.bytes_per_param) == \
        (sum(p.numel() for p in reference.parameters()), lora, width)
    assert shapes.kv_bytes_per_token == 2 * 2 * 2 * 16 * width  # layers x kv heads x head_dim, K and V


def test_counting_a_lean_model_imports_no_transformers():
    """`explain` and the capacity plan count shapes; for a lean model that must not load transformers (seconds
    of imports, and torch._dynamo's triton, whose bindings print leak warnings at exit)."""
    import subprocess
    import sys

    code = ("import sys; from retrain_ray.models.flops import model_shapes; "
            "model_shapes('builtin:tiny', full=False, lora_rank=4, target_modules=('q_proj',)); "
            "print('transformers' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "False"
