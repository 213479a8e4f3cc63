"""The lean LoRA (models/lean_lora.py, lean_adapter.py) against PEFT's LoRA on transformers' Llama.

Same seed, same files: the adapters start bitwise equal (names, order, values, dtypes, frozen flags),
training steps give bit-identical log-probabilities, losses and weights (dropout included: it draws the
same RNG), the adapter folder is PEFT's (config fields, tensor names, values), PEFT loads ours onto
transformers' Llama and we load PEFT's, a checkpoint resumes across the two, and what weight sync and
squeeze read is the same.
"""

from __future__ import annotations

import json
import re

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from peft import PeftModel
from peft.tuners.tuners_utils import check_target_module_exists
from safetensors import safe_open
from transformers import AutoModelForCausalLM

from retrain_ray.backends.local import LocalBackend, LoraSettings
from retrain_ray.backends.local.scoring import microbatches, scored_logprobs
from retrain_ray.backends.types import TrainBatch
from retrain_ray.engines.vllm.reload import write_peft_adapter
from retrain_ray.engines.weights import export_trainable, install_weights
from retrain_ray.models.lean_loading import load_lean_model
from retrain_ray.models.lean_lora import (
    PEFT_FORMAT_VERSION,
    LeanLoraModel,
    is_lora_target,
    load_adapter,
    prepare_trainable,
    save_adapter,
)
from retrain_ray.squeeze.squeeze import read_adapter

DEFAULT = LoraSettings(rank=8)
VARIANTS = {
    "r8": DEFAULT,
    "dropout, freeze A, layer 1 of q/v/down": LoraSettings(rank=4, alpha=32, dropout=0.1, freeze_a=True,
                                                          target_modules=("q_proj", "v_proj", "down_proj"),
                                                          layers_to_transform=(1,)),
}


def _pair(tiny_dir, lora: LoraSettings, dtype: torch.dtype = torch.float32, seed: int = 0):
    """(lean LoRA, PEFT LoRA on transformers' Llama), each adapter initialised under `seed`."""
    lean = load_lean_model(tiny_dir, dtype=dtype)
    hf = AutoModelForCausalLM.from_pretrained(tiny_dir, local_files_only=True, dtype=dtype)
    models = []
    for model in (lean, hf):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            models.append(prepare_trainable(model, "lora", lora))
    assert isinstance(models[0], LeanLoraModel) and isinstance(models[1], PeftModel)
    return models[0], models[1]


def _batch(seed: int = 0) -> TrainBatch:
    gen = torch.Generator().manual_seed(seed)
    tokens, logprobs, advantages, prompt_lens = [], [], [], []
    for row in range(6):
        prompt, completion = 2 + row % 3, 3 + row % 4
        tokens.append(torch.randint(4, 60, (prompt + completion,), generator=gen).tolist())
        logprobs.append([0.0] * prompt + [-1.5] * completion)
        advantages.append([0.0] * prompt + [1.0 if row % 2 else -1.0] * completion)
        prompt_lens.append(prompt)
    return TrainBatch(tokens, logprobs, advantages, prompt_lens, temperature=0.8)


def _logprobs(model: torch.nn.Module, batch: TrainBatch) -> list[torch.Tensor]:
    model.eval()
    with torch.no_grad():
        return [scored_logprobs(model, mb, batch.temperature, 1.0) for mb in microbatches(batch, 0, torch.device("cpu"))]


def _steps(backend: LocalBackend, steps: range) -> list[tuple[float, float]]:
    """(loss, grad_norm) of each step; the global RNG (dropout's) is seeded alike for every step."""
    out = []
    for step in steps:
        torch.manual_seed(100 + step)
        result = backend.train_step(_batch(step), lr=3e-2, weight_decay=0.01)
        out.append((result.loss, result.metrics["grad_norm"]))
    return out


def _assert_same_weights(a: torch.nn.Module, b: torch.nn.Module) -> None:
    pa, pb = list(a.named_parameters()), list(b.named_parameters())
    assert [n for n, _ in pa] == [n for n, _ in pb]
    for (name, x), (_, y) in zip(pa, pb, strict=True):
        assert x.dtype == y.dtype and x.requires_grad == y.requires_grad, name
        assert torch.equal(x, y), name


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_the_adapter_starts_as_peft_s(tiny_dir, variant):
    lean, peft = _pair(tiny_dir, VARIANTS[variant])
    _assert_same_weights(lean, peft)
    assert sorted(lean.state_dict()) == sorted(peft.state_dict())
    frozen_a = [not p.requires_grad for n, p in lean.named_parameters() if ".lora_A." in n]
    assert frozen_a and set(frozen_a) == {VARIANTS[variant].freeze_a}


def test_a_bf16_base_gets_a_float32_adapter_as_peft_gives(tiny_dir):
    lean, peft = _pair(tiny_dir, DEFAULT, dtype=torch.bfloat16)
    _assert_same_weights(lean, peft)
    assert {p.dtype for n, p in lean.named_parameters() if "lora_" in n} == {torch.float32}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_training_steps_are_bitwise_peft_s(tiny_dir, variant):
    lean, peft = _pair(tiny_dir, VARIANTS[variant])
    a, b = LocalBackend(lean, seed=3), LocalBackend(peft, seed=3)
    assert _steps(a, range(3)) == _steps(b, range(3))
    _assert_same_weights(lean, peft)
    for x, y in zip(_logprobs(lean, _batch(7)), _logprobs(peft, _batch(7)), strict=True):
        assert torch.equal(x, y)


def _trained_pair(tiny_dir, lora: LoraSettings = DEFAULT):
    lean, peft = _pair(tiny_dir, lora)
    _steps(LocalBackend(lean), range(2))
    _steps(LocalBackend(peft), range(2))
    return lean, peft


def test_the_adapter_folder_is_peft_s(tiny_dir, tmp_path):
    lean, peft = _trained_pair(tiny_dir, VARIANTS["dropout, freeze A, layer 1 of q/v/down"])
    save_adapter(lean, tmp_path / "lean")
    peft.save_pretrained(str(tmp_path / "peft"))
    ours, theirs = (json.loads((tmp_path / d / "adapter_config.json").read_text()) for d in ("lean", "peft"))
    assert sorted(ours.pop("target_modules")) == sorted(theirs.pop("target_modules"))
    assert ours.pop("peft_version") == PEFT_FORMAT_VERSION
    theirs.pop("peft_version")
    assert ours == theirs
    with safe_open(str(tmp_path / "lean" / "adapter_model.safetensors"), "pt") as f, \
            safe_open(str(tmp_path / "peft" / "adapter_model.safetensors"), "pt") as g:
        assert f.metadata() == g.metadata() and sorted(f.keys()) == sorted(g.keys())
        assert all(re.fullmatch(r"base_model\.model\.model\.layers\.1\.\S+\.lora_[AB]\.weight", k) for k in f.keys())
        for key in f.keys():
            assert torch.equal(f.get_tensor(key), g.get_tensor(key)), key


def test_peft_loads_the_lean_adapter_onto_transformers_llama(tiny_dir, tmp_path):
    lean, _ = _trained_pair(tiny_dir)
    save_adapter(lean, tmp_path / "adapter")
    base = AutoModelForCausalLM.from_pretrained(tiny_dir, local_files_only=True, dtype=torch.float32)
    loaded = PeftModel.from_pretrained(base, str(tmp_path / "adapter"))
    assert any(not torch.equal(p, torch.zeros_like(p)) for n, p in lean.named_parameters() if ".lora_B." in n)
    for x, y in zip(_logprobs(lean, _batch(5)), _logprobs(loaded, _batch(5)), strict=True):
        assert torch.equal(x, y)


def test_the_lean_lora_loads_a_peft_adapter_and_refuses_another_rank(tiny_dir, tmp_path):
    _, peft = _trained_pair(tiny_dir)
    peft.save_pretrained(str(tmp_path / "adapter"))
    fresh, _ = _pair(tiny_dir, DEFAULT, seed=11)
    load_adapter(fresh, tmp_path / "adapter")
    _assert_same_weights(fresh, peft)
    other, _ = _pair(tiny_dir, LoraSettings(rank=4))
    wrong_rank = r"lora_A\.default\.weight has shape \(8, \d+\), the model's is \(4, \d+\) \(a different lora_rank"
    with pytest.raises(ValueError, match=wrong_rank):
        load_adapter(other, tmp_path / "adapter")
    fewer, _ = _pair(tiny_dir, LoraSettings(rank=8, target_modules=("q_proj",)))
    with pytest.raises(KeyError, match="unexpected keys"):
        load_adapter(fewer, tmp_path / "adapter")


@pytest.mark.parametrize("direction", ["peft to lean", "lean to peft"])
def test_a_checkpoint_resumes_across_lean_and_peft(tiny_dir, tmp_path, direction):
    """Weights and AdamW moments saved by one kind continue, in the other, exactly as the first would."""
    lean, peft = _pair(tiny_dir, DEFAULT)
    writer, reader = (peft, lean) if direction == "peft to lean" else (lean, peft)
    first = LocalBackend(writer, seed=1)
    _steps(first, range(2))
    first.save_checkpoint(tmp_path)
    assert (tmp_path / "adapter" / "adapter_config.json").is_file()
    second = LocalBackend(reader, seed=1)
    second.load_checkpoint(tmp_path)
    assert second.version == 2
    assert _steps(first, range(2, 4)) == _steps(second, range(2, 4))
    _assert_same_weights(lean, peft)


def test_both_lora_kinds_refuse_a_checkpoint_without_an_adapter(tiny_dir, tmp_path):
    """One check, one message, for the lean LoRA and PEFT's (backends/local/checkpoint.py)."""
    from retrain_ray.backends.local.checkpoint import load_weights

    (tmp_path / "adapter").mkdir()
    for model in _pair(tiny_dir, DEFAULT):
        with pytest.raises(FileNotFoundError, match=r"adapter holds no PEFT adapter: is .* a LoRA checkpoint\?"):
            load_weights(model, tmp_path)


def test_weight_sync_and_squeeze_see_the_same_tensors(tiny_dir, tmp_path):
    lean, peft = _trained_pair(tiny_dir)
    ours, theirs = export_trainable(lean), export_trainable(peft)
    assert list(ours) == list(theirs) and all(torch.equal(ours[k], theirs[k]) for k in ours)
    fresh, peft_sampler = _pair(tiny_dir, DEFAULT, seed=5)
    install_weights(fresh, ours)  # a split sampler's copy takes the trainer's update
    install_weights(peft_sampler, ours)  # ... and so does a PEFT model (the Ray Serve endpoint's)
    _assert_same_weights(fresh, lean)
    _assert_same_weights(peft_sampler, lean)
    write_peft_adapter(tmp_path / "vllm", DEFAULT, ours)  # the vLLM LoRA sync's folder
    save_adapter(lean, tmp_path / "ckpt")
    config, layers = read_adapter(tmp_path / "ckpt")
    _, synced = read_adapter(tmp_path / "vllm")
    assert config["r"] == 8 and sorted(layers) == sorted(synced) and len(layers) == 14
    for module, (a, b) in layers.items():
        assert torch.equal(a, synced[module][0]) and torch.equal(b, synced[module][1])


def _peft_config(targets: list[str], layers: list[int], pattern: str):
    from peft import LoraConfig

    return LoraConfig(r=2, target_modules=targets, layers_to_transform=layers or None,
                      layers_pattern=pattern if layers else None)


_KEYS = ["model.layers.0.self_attn.q_proj", "model.layers.1.mlp.down_proj", "model.layers.12.mlp.up_proj",
         "lm_head", "model.h.3.attn.q_proj", "q_proj", "model.layers.2.experts.0.up_proj", "model.norm"]


@settings(max_examples=60, deadline=None)
@given(targets=st.lists(st.sampled_from(["q_proj", "up_proj", "down_proj", "lm_head", "norm"]), min_size=1,
                        unique=True),
       layers=st.lists(st.integers(0, 12), max_size=3, unique=True), pattern=st.sampled_from(["layers", "h", ""]))
def test_target_matching_is_peft_s(targets, layers, pattern):
    config = _peft_config(targets, layers, pattern)
    for key in _KEYS:
        assert is_lora_target(key, targets, layers, pattern) == bool(check_target_module_exists(config, key)), key


@pytest.mark.parametrize("rows", [3, 64])
def test_a_half_base_samples_the_adapter_training_last_changed(rows):
    """On a bf16 base the float32 adapter is cast to bf16 (not each activation to float32 and back), except for
    a decode step's few rows, which run it in float32 (cheaper there); while sampling the cast copies are reused
    until an in-place update (an optimizer step, a weight sync) changes the adapter; gradients still reach the
    float32 adapter."""
    from torch import nn
    from torch.nn import functional as F

    from retrain_ray.models.lean_lora import FLOAT32_LORA_BELOW_ROWS, LoraLinear

    torch.manual_seed(0)
    layer = LoraLinear(nn.Linear(6, 5, bias=False).to(torch.bfloat16), rank=2, scaling=2.0, dropout=0.0)
    a, b = layer.lora_A["default"].weight, layer.lora_B["default"].weight
    assert a.dtype == b.dtype == torch.float32
    x = torch.randn(rows, 6, dtype=torch.bfloat16)

    def expected() -> torch.Tensor:
        with torch.no_grad():
            base = layer.base_layer(x)
            if rows < FLOAT32_LORA_BELOW_ROWS:
                return base.add_(F.linear(F.linear(x.float(), a), b).to(torch.bfloat16), alpha=2.0)
            return base.addmm_(F.linear(x, a.to(torch.bfloat16)), b.to(torch.bfloat16).t(), alpha=2.0)

    with torch.no_grad():
        b.normal_()
    with torch.inference_mode():
        first = layer(x)
    assert torch.equal(first, expected())
    with torch.no_grad():
        a.add_(0.5)  # in place, as AdamW and install_weights change it
    with torch.inference_mode():
        second = layer(x)
    assert torch.equal(second, expected()) and not torch.equal(second, first)
    layer(x).float().sum().backward()
    assert a.grad is not None and b.grad is not None
    assert a.grad.dtype == b.grad.dtype == torch.float32 and bool(a.grad.abs().sum() > 0)
