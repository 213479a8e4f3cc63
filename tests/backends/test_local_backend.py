"""Local backend: on-policy ratio 1, weight sync (shared and split), clipping, micro-batching, checkpoints."""

from __future__ import annotations

import pytest
import torch

from retrain_ray.backends.local import (
    LocalBackend,
    LoraSettings,
    LossSettings,
    OptimizerSettings,
    PolicySettings,
    build_shared_policy,
    build_split_engine,
)
from retrain_ray.backends.local.scoring import microbatches, scored_logprobs
from retrain_ray.backends.types import TrainBackend, TrainBatch
from retrain_ray.engines import SamplingParams
from retrain_ray.models import encode_prompt

T, TOP_P = 0.7, 0.9
PARAMS = SamplingParams(max_tokens=8, temperature=T, top_p=TOP_P)


def _policy(tiny_cache, finetune="full", **kw):
    settings = PolicySettings(finetune=finetune, lora=LoraSettings(rank=4, alpha=32), top_p=TOP_P, **kw)
    return build_shared_policy("builtin:tiny", settings, device="cpu", cache_dir=tiny_cache)


def _batch(engine, tok, seed=0) -> TrainBatch:
    prompts = [encode_prompt(tok, p) for p in ["123", "45", "6789"]]
    groups = engine.generate(prompts, 4, PARAMS)
    gen = torch.Generator().manual_seed(seed)
    tokens, logprobs, advs, lens = [], [], [], []
    for prompt, group in zip(prompts, groups, strict=True):
        for r in group:
            a = float(torch.randn(1, generator=gen))
            tokens.append(prompt + list(r.token_ids))
            logprobs.append([0.0] * len(prompt) + list(r.logprobs))
            advs.append([0.0] * len(prompt) + [a] * len(r.token_ids))
            lens.append(len(prompt))
    return TrainBatch(tokens, logprobs, advs, lens, temperature=T)


def _trainer_logprobs(backend, batch):
    with torch.no_grad():
        return [scored_logprobs(backend.model, mb, batch.temperature, backend.top_p) for mb in microbatches(batch, 0, backend.device)]


@pytest.mark.parametrize("finetune", ["lora", "full"])
def test_first_on_policy_update_has_ratio_one(tiny_cache, finetune):
    engine, backend, tok = _policy(tiny_cache, finetune, loss=LossSettings(clip_eps=0.2))
    assert isinstance(backend, TrainBackend)
    assert backend.capabilities.checkpoint_resume_mode == "exact"
    batch = _batch(engine, tok)
    before = {n: p.detach().clone() for n, p in backend.model.named_parameters() if p.requires_grad}
    result = backend.train_step(batch, lr=1e-2, weight_decay=0.0)
    assert result.metrics["policy/abs_kl"] < 1e-5
    assert result.metrics["clip_fraction"] == 0.0
    assert result.metrics["local_action_tokens"] == sum(len(a) - lp for a, lp in zip(batch.advantages_D, batch.prompt_lens_D, strict=True))
    assert backend.version == 1
    after = {n: p.detach() for n, p in backend.model.named_parameters() if p.requires_grad}
    assert any(not torch.equal(before[n], after[n]) for n in after)
    if finetune == "lora":
        assert all("lora_" in n for n in after)


def test_shared_engine_samples_new_weights(tiny_cache):
    engine, backend, tok = _policy(tiny_cache)
    batch = _batch(engine, tok)
    backend.train_step(batch, lr=1e-2, weight_decay=0.0)
    update = backend.export_weights()
    assert update.tensors == {} and update.version == 1
    engine.load_weights(update)
    assert engine.weights_version == 1
    fresh = _batch(engine, tok, seed=1)
    ratio_one = backend.train_step(fresh, lr=1e-2, weight_decay=0.0)
    assert ratio_one.metrics["policy/abs_kl"] < 1e-5


def test_split_engine_receives_tensors_and_matches_trainer(tiny_cache):
    settings = PolicySettings(finetune="lora", lora=LoraSettings(rank=4, alpha=32), top_p=TOP_P)
    engine, backend, tok = build_shared_policy("builtin:tiny", settings, device="cpu", cache_dir=tiny_cache)
    backend.shares_model_with_engine = False
    split, _ = build_split_engine("builtin:tiny", settings, device="cpu", cache_dir=tiny_cache)
    backend.train_step(_batch(engine, tok), lr=5e-2, weight_decay=0.0)
    update = backend.export_weights()
    assert update.version == 1 and update.tensors
    assert all(t.device.type == "cpu" for t in update.tensors.values())
    split.load_weights(update)
    assert split.weights_version == 1
    batch = _batch(split, tok, seed=2)
    new_lp = _trainer_logprobs(backend, batch)[0]
    for i, (row, n) in enumerate(zip(batch.logprobs_D, batch.prompt_lens_D, strict=True)):
        sampled = torch.tensor(row[n:])
        torch.testing.assert_close(new_lp[i, n - 1 : len(row) - 1], sampled, atol=1e-5, rtol=0)
    wrong = PolicySettings(finetune="lora", lora=LoraSettings(rank=4, target_modules=("q_proj",)), top_p=TOP_P)
    other, _ = build_split_engine("builtin:tiny", wrong, device="cpu", cache_dir=tiny_cache)
    with pytest.raises(KeyError, match="unknown"):
        other.load_weights(update)


def test_grad_clipping_limits_norm(tiny_cache):
    engine, backend, tok = _policy(tiny_cache, optimizer=OptimizerSettings(grad_clip_norm=1e-3))
    result = backend.train_step(_batch(engine, tok), lr=1e-3, weight_decay=0.0)
    assert result.metrics["grad_norm"] > 1e-3
    clipped = torch.nn.utils.get_total_norm([p.grad for p in backend.model.parameters() if p.grad is not None])
    assert float(clipped) <= 1e-3 * (1 + 1e-4)


@pytest.mark.parametrize(("split", "microbatches"), [({"micro_batch_size": 5}, 3), ({"accumulation_steps": 4}, 4)])
def test_a_batch_split_into_microbatches_accumulates_the_whole_batch_gradient(tiny_cache, split, microbatches):
    engine, whole, tok = _policy(tiny_cache)
    batch = _batch(engine, tok)
    _, parts, _ = _policy(tiny_cache, **split)
    r_whole = whole.train_step(batch, lr=0.0, weight_decay=0.0)
    r_parts = parts.train_step(batch, lr=0.0, weight_decay=0.0)
    assert r_parts.metrics["local_microbatches"] == microbatches
    assert r_parts.loss == pytest.approx(r_whole.loss, abs=1e-6)
    for (name, a), b in zip(whole.model.named_parameters(), parts.model.parameters(), strict=True):
        torch.testing.assert_close(a.grad, b.grad, atol=1e-5, rtol=0, msg=name)


def _optimizer_tensors(backend: LocalBackend) -> list[torch.Tensor]:
    return [t.clone() for s in backend.optimizer.state.values() for t in s.values()]


@pytest.mark.parametrize("finetune", ["lora", "full"])
def test_checkpoint_restores_weights_and_moments_exactly(tiny_cache, tmp_path, finetune):
    engine, backend, tok = _policy(tiny_cache, finetune)
    batches = [_batch(engine, tok, seed=s) for s in range(3)]
    for b in batches[:2]:
        backend.train_step(b, lr=1e-2, weight_decay=0.01)
    backend.save_checkpoint(tmp_path)
    saved_w = {n: p.detach().clone() for n, p in backend.model.named_parameters() if p.requires_grad}
    saved_opt = _optimizer_tensors(backend)
    expected = backend.train_step(batches[2], lr=1e-2, weight_decay=0.01)
    _, resumed, _ = _policy(tiny_cache, finetune)
    resumed.load_checkpoint(tmp_path)
    assert resumed.version == 2
    for n, p in resumed.model.named_parameters():
        if p.requires_grad:
            assert torch.equal(p.detach(), saved_w[n]), n
    for a, b in zip(_optimizer_tensors(resumed), saved_opt, strict=True):
        assert torch.equal(a, b)
    again = resumed.train_step(batches[2], lr=1e-2, weight_decay=0.01)
    assert again.loss == expected.loss
    for (n, a), b in zip(backend.model.named_parameters(), resumed.model.parameters(), strict=True):
        assert torch.equal(a, b), n


def test_sft_step_lowers_cross_entropy(tiny_cache):
    engine, backend, tok = _policy(tiny_cache)
    prompt = encode_prompt(tok, "Q:")
    target = encode_prompt(tok, "42") + [tok.eos_token_id]
    row = prompt + target
    batch = TrainBatch([row] * 4, [[0.0] * len(row)] * 4, [[0.0] * len(prompt) + [1.0] * len(target)] * 4, [len(prompt)] * 4)
    losses = [backend.sft_step(batch, lr=1e-2, weight_decay=0.0).loss for _ in range(15)]
    assert losses[-1] < 0.5 * losses[0]


def test_empty_model_and_bad_finetune_rejected(tiny_cache):
    model = torch.nn.Linear(2, 2)
    for p in model.parameters():
        p.requires_grad_(False)
    with pytest.raises(ValueError, match="no trainable"):
        LocalBackend(model)
    with pytest.raises(ValueError, match="finetune"):
        _policy(tiny_cache, "qlora")
    with pytest.raises(ValueError, match="match no Linear"):
        build_shared_policy(
            "builtin:tiny", PolicySettings(lora=LoraSettings(rank=2, target_modules=("c_attn",))),
            device="cpu", cache_dir=tiny_cache,
        )


@pytest.mark.gpu
def test_bf16_autocast_step_on_gpu(tiny_cache):
    settings = PolicySettings(finetune="lora", lora=LoraSettings(rank=4), top_p=TOP_P)
    engine, backend, tok = build_shared_policy("builtin:tiny", settings, device="cuda", cache_dir=tiny_cache)
    batch = _batch(engine, tok)
    result = backend.train_step(batch, lr=1e-2, weight_decay=0.0)
    assert torch.isfinite(torch.tensor(result.loss))
    assert result.metrics["policy/abs_kl"] < 2e-2  # bf16 logits: close to, not exactly, on-policy


def test_policy_from_config(tiny_cache):
    from retrain_ray.backends.local import build_local_policy, settings_from_config
    from retrain_ray.config import RetrainConfig

    cfg = RetrainConfig.model_validate({
        "model": {"model": "builtin:tiny", "lora_rank": 4, "finetune": "lora"},
        "training": {"micro_batch_size": 4, "top_p": 0.8, "clip_eps": 0.2},
        "optimizer": {"grad_clip_norm": 1.0},
        "backend": {"options": {"lora_target_modules": "q_proj,v_proj"}},
    })
    settings = settings_from_config(cfg)
    assert settings.lora.effective_alpha == 8.0 and settings.lora.target_modules == ("q_proj", "v_proj")
    engine, backend, tok = build_local_policy(cfg, device="cpu", cache_dir=tiny_cache)
    assert backend.shares_model_with_engine and engine.model is backend.model
    assert (backend.micro_batch_size, backend.top_p, backend.optim.grad_clip_norm) == (4, 0.8, 1.0)
    assert all(("q_proj" in n or "v_proj" in n) for n, p in backend.model.named_parameters() if p.requires_grad)


def test_a_bf16_base_on_cpu_samples_and_trains_a_float32_adapter(tiny_cache):
    """`[inference] dtype = "bf16"` on the CPU: the frozen base in bf16 (fast matmuls where the CPU has AMX),
    the LoRA adapter and its AdamW moments in float32, sampling close to the trainer's own log-probs."""
    settings = PolicySettings(finetune="lora", lora=LoraSettings(rank=4, alpha=32), top_p=TOP_P, dtype="bf16")
    engine, backend, tok = build_shared_policy("builtin:tiny", settings, device="cpu", cache_dir=tiny_cache)
    dtypes = {("lora_" in n, p.dtype) for n, p in backend.model.named_parameters()}
    assert dtypes == {(False, torch.bfloat16), (True, torch.float32)}
    before = {n: p.detach().clone() for n, p in backend.model.named_parameters() if p.requires_grad}
    for _ in range(2):
        batch = _batch(engine, tok)
        result = backend.train_step(batch, lr=1e-2, weight_decay=0.0)
        assert torch.isfinite(torch.tensor(result.loss))
        assert result.metrics["policy/abs_kl"] < 2e-2  # bf16 logits: close to, not exactly, on-policy
    after = dict(backend.model.named_parameters())
    assert all(after[n].dtype == torch.float32 for n in before)
    assert any(not torch.equal(after[n], before[n]) for n in before)


def test_a_frozen_a_travels_with_the_weight_sync(tiny_cache, tmp_path):
    """`lora_freeze_a`: the sync carries the frozen A matrices too, so an engine holding its own copy (vLLM
    writes the update as a PEFT adapter folder) gets the whole adapter, not B alone."""
    from safetensors.torch import load_file

    from retrain_ray.engines.vllm.reload import write_peft_adapter

    settings = PolicySettings(finetune="lora", lora=LoraSettings(rank=4, alpha=32, freeze_a=True), top_p=TOP_P)
    engine, backend, tok = build_shared_policy("builtin:tiny", settings, device="cpu", cache_dir=tiny_cache)
    backend.shares_model_with_engine = False
    backend.train_step(_batch(engine, tok), lr=5e-2, weight_decay=0.0)
    update = backend.export_weights()
    a_names = {n.replace(".lora_A.", ".") for n in update.tensors if ".lora_A." in n}
    assert a_names and a_names == {n.replace(".lora_B.", ".") for n in update.tensors if ".lora_B." in n}
    split, _ = build_split_engine("builtin:tiny", settings, device="cpu", cache_dir=tiny_cache)
    split.load_weights(update)
    for name, param in split.model.named_parameters():
        if ".lora_" in name:
            assert torch.equal(param, update.tensors[name])
    write_peft_adapter(tmp_path / "adapter", settings.lora, update.tensors)
    written = load_file(str(tmp_path / "adapter" / "adapter_model.safetensors"))
    assert sum(".lora_A." in n for n in written) == sum(".lora_B." in n for n in written) == len(a_names)
