"""Naive sampling engine: one sequence at a time, no KV cache. A benchmark baseline only.

Each new token re-runs the full forward pass over the whole sequence so far. It draws from the same
distribution as `PyTorchEngine` (shared `distribution` module) but is O(T^2) per row and unbatched.
"""

from __future__ import annotations

import torch

from retrain_ray.engines.distribution import LOG_MIN_PROB, entropy, filtered_logprobs
from retrain_ray.engines.pytorch.engine import autocast_for, check_request
from retrain_ray.engines.types import SampleResult, SamplingParams, WeightsVersion, WeightUpdate
from retrain_ray.engines.weights import install_update


class NaiveEngine(WeightsVersion):
    """SamplingEngine that decodes each row alone with full recomputation (baseline)."""

    def __init__(self, model: torch.nn.Module, *, eos_token_id: int, seed: int = 0) -> None:
        self.model = model
        self.eos_token_id = int(eos_token_id)
        self.device = next(model.parameters()).device
        self.generator = torch.Generator(device=self.device).manual_seed(seed)

    def load_weights(self, update: WeightUpdate) -> None:
        self._version = install_update(self.model, update)

    def generate(
        self, prompt_ids_P: list[list[int]], num_samples: int, params: SamplingParams
    ) -> list[list[SampleResult]]:
        check_request(prompt_ids_P, num_samples, params)
        was_training = self.model.training
        self.model.eval()
        try:
            return [[self._one(list(p), params) for _ in range(num_samples)] for p in prompt_ids_P]
        finally:
            self.model.train(was_training)

    @torch.no_grad()
    def _one(self, prompt: list[int], params: SamplingParams) -> SampleResult:
        seq, tokens = list(prompt), list[int]()
        logprobs, entropies = list[float](), list[float]()
        for _ in range(params.max_tokens):
            with autocast_for(self.device):
                logits_V = self.model(input_ids=torch.tensor([seq], device=self.device)).logits[0, -1]
            logp_V = filtered_logprobs(logits_V[None], params.temperature, params.top_p)[0]
            token = int(torch.multinomial(logp_V.exp(), 1, generator=self.generator))
            tokens.append(token)
            logprobs.append(float(logp_V[token].clamp_min(LOG_MIN_PROB)))
            if params.compute_entropy:
                entropies.append(float(entropy(logits_V[None], params.temperature)[0]))
            seq.append(token)
            if token == self.eos_token_id:
                break
        reason = "stop" if tokens and tokens[-1] == self.eos_token_id else "length"
        return SampleResult(tuple(tokens), tuple(logprobs), reason, tuple(entropies) if params.compute_entropy else None)
