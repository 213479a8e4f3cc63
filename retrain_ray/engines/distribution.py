"""The sampling distribution, shared by the sampler and the trainer so both score tokens identically.

Sampler math of the original (spec 1.9): `p = softmax(logits / max(T, 1e-7))`; with `top_p < 1`, sort
descending and drop every token whose preceding mass already exceeds top_p (`cumsum - p > top_p`),
renormalise, sample; the reported logprob is `log(p_filtered)` clamped at 1e-12; the entropy is that
of the tempered *unfiltered* distribution.

Departure from the original: the original trainer scored tokens under the plain T=1 softmax, so the
first on-policy update already had an importance ratio != 1 (hazard 13.8). Here the trainer calls
`token_logprobs` with the sampler's temperature and top-p, so ratio == 1 up to float rounding. The
kept set (which tokens survive top-p) is a discrete choice made without gradient; gradients flow
through the tempered log-softmax and the renormalising log-sum-exp.

Everything is computed in log space in float32: `log p_filtered = log_softmax(z/T) - logsumexp over the
kept tokens`, which equals the spec's `log(p / sum kept p)`.
"""

from __future__ import annotations

import math

import torch

MIN_TEMPERATURE = 1e-7
MIN_PROB = 1e-12
LOG_MIN_PROB = math.log(MIN_PROB)


def tempered_logprobs(logits_N_V: torch.Tensor, temperature: float) -> torch.Tensor:
    """log softmax(logits / max(T, 1e-7)) in float32."""
    return torch.log_softmax(logits_N_V.float() / max(float(temperature), MIN_TEMPERATURE), dim=-1)


def top_p_keep_mask(logprobs_N_V: torch.Tensor, top_p: float) -> torch.Tensor:
    """Bool mask of the tokens that survive nucleus filtering (the top token always survives)."""
    with torch.no_grad():
        probs_N_V = logprobs_N_V.exp()
        sorted_N_V, order_N_V = torch.sort(probs_N_V, dim=-1, descending=True)
        drop_sorted_N_V = (torch.cumsum(sorted_N_V, dim=-1) - sorted_N_V) > top_p
        return torch.zeros_like(drop_sorted_N_V).scatter(-1, order_N_V, ~drop_sorted_N_V)


def filtered_logprobs(logits_N_V: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """Log-probabilities of the tempered, top-p renormalised distribution (-inf for dropped tokens)."""
    logp_N_V = tempered_logprobs(logits_N_V, temperature)
    if top_p >= 1.0:
        return logp_N_V
    keep_N_V = top_p_keep_mask(logp_N_V, top_p)
    masked_N_V = logp_N_V.masked_fill(~keep_N_V, float("-inf"))
    return masked_N_V - torch.logsumexp(masked_N_V, dim=-1, keepdim=True)


def token_logprobs(
    logits_N_V: torch.Tensor, tokens_N: torch.Tensor, temperature: float, top_p: float
) -> torch.Tensor:
    """log p(token) under `filtered_logprobs`, clamped below at log(1e-12) (the sampler's clamp)."""
    logp_N_V = filtered_logprobs(logits_N_V, temperature, top_p)
    picked_N = logp_N_V.gather(-1, tokens_N.unsqueeze(-1)).squeeze(-1)
    return picked_N.clamp_min(LOG_MIN_PROB)


def entropy(logits_N_V: torch.Tensor, temperature: float) -> torch.Tensor:
    """Shannon entropy (nats) of the tempered, unfiltered distribution."""
    logp_N_V = tempered_logprobs(logits_N_V, temperature)
    return -(logp_N_V.exp() * logp_N_V).sum(dim=-1)
