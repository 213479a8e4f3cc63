"""Trainer-side log-probabilities of the sampled tokens, under the sampler's own distribution.

`scored_logprobs` runs one forward pass over a micro-batch and scores every next token with
`retrain_ray.engines.distribution.token_logprobs` at the batch's temperature and the sampler's top_p:
the same function the sampler used. So on the first on-policy update new == old log-probs and the
importance ratio is 1 (fixes hazard 13.8 of the original, whose trainer used the T=1 softmax).
"""

from __future__ import annotations

import torch

from retrain_ray.backends.local.batching import MicroBatch
from retrain_ray.engines.distribution import token_logprobs
from retrain_ray.engines.pytorch.engine import autocast_for


def scored_logprobs(model: torch.nn.Module, mb: MicroBatch, temperature: float, top_p: float) -> torch.Tensor:
    """new_logprobs_B_S (S = T - 1), with gradient."""
    return logprobs_from_logits(next_token_logits(model, mb), mb, temperature, top_p)


def logprobs_from_logits(logits_B_S_V: torch.Tensor, mb: MicroBatch, temperature: float, top_p: float) -> torch.Tensor:
    b, s, v = logits_B_S_V.shape
    flat_N = token_logprobs(logits_B_S_V.reshape(b * s, v), mb.targets_B_S.reshape(b * s), temperature, top_p)
    return flat_N.view(b, s)


def next_token_logits(model: torch.nn.Module, mb: MicroBatch) -> torch.Tensor:
    """logits_B_S_V (float32) of the next token at each position but the last: one forward pass."""
    ids_B_T = mb.input_ids_B_T
    positions_B_T = torch.arange(ids_B_T.shape[1], device=ids_B_T.device).expand_as(ids_B_T)
    with autocast_for(ids_B_T.device):
        # use_cache=False: a scoring pass has no next token, so the KV cache the config asks for is waste
        logits_B_T_V = model(input_ids=ids_B_T, attention_mask=mb.attention_mask_B_T, position_ids=positions_B_T,
                             use_cache=False).logits
    return logits_B_T_V[:, :-1, :].float()
