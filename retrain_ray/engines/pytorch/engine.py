"""Batched PyTorch sampling engine: all P x num_samples rows decode together with a KV cache.

Prompts are left-padded into one batch; positions are counted from each row's first real token
(`cumsum(mask) - 1`), so a padded row sees exactly the positions it would see alone. The decode loop
calls `model(input_ids, attention_mask, position_ids, past_key_values, use_cache=True)` itself instead
of `generate()`, because it must know the exact tempered / top-p distribution each token was drawn from
(`retrain_ray.engines.pytorch.engine`, shared with the trainer). Rows stop at EOS (kept in the output,
finish reason "stop") or at `max_tokens` ("length"); finished rows keep feeding pad tokens until every
row is done. Sampling uses the engine's own seeded `torch.Generator` (`engine.generator`), so a run's
sampling is reproducible and its state can be checkpointed. Each token is `torch.multinomial`'s draw, bit for
bit, with the noise of the next step drawn while its forward pass runs (engines/pytorch/noise.py).

Departures from the original PyTorch engine: no exact-prefix KV cache across calls (the batch is
decoded in one pass instead), and weights arrive as in-memory `WeightUpdate`s with strict name checks
rather than adapter folders on disk.

Naive sampling engine: one sequence at a time, no KV cache. A benchmark baseline only.

Each new token re-runs the full forward pass over the whole sequence so far. It draws from the same
distribution as `PyTorchEngine` (shared `distribution` module) but is O(T^2) per row and unbatched.

The sampling distribution, shared by the sampler and the trainer so both score tokens identically.

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

import contextlib
import math
from typing import cast

import torch

from retrain_ray.engines.pytorch.noise import NoiseAhead
from retrain_ray.engines.types import SampleResult, SamplingParams, WeightsVersion, WeightUpdate
from retrain_ray.engines.weights import ModeSwitch, install_update
from retrain_ray.models import Tokenizer
from retrain_ray.models.tokenizer import single_id


def autocast_for(device: torch.device) -> contextlib.AbstractContextManager[object]:
    """bf16 autocast on CUDA, nothing on CPU (fp32)."""
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def left_pad(rows: list[list[int]], pad_id: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(input_ids_N_L, attention_mask_N_L), left padded to the longest row."""
    width = max(len(r) for r in rows)
    ids_N_L = torch.tensor([[pad_id] * (width - len(r)) + list(r) for r in rows], dtype=torch.long)
    mask_N_L = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows], dtype=torch.long)
    return ids_N_L.to(device), mask_N_L.to(device)


def _values(t: torch.Tensor) -> list[int]:
    """A 1-D integer or bool tensor as Python values."""
    return cast("list[int]", t.tolist())  # pyright: ignore[reportUnknownMemberType]  # torch: bare `List`


def _by_row(steps: list[torch.Tensor], rows: int) -> list[list[float]]:
    """Per-step tensors of `rows` values -> one list per row (empty rows when no step ran)."""
    if not steps:
        return [[] for _ in range(rows)]
    return cast("list[list[float]]", torch.stack(steps, 1).tolist())  # pyright: ignore[reportUnknownMemberType]  # torch: bare `List`


class _Trace:
    """Per-row outputs of one decode: tokens, logprobs, entropies, finished flags."""

    def __init__(self, n: int, device: torch.device) -> None:
        self.tokens: list[torch.Tensor] = []
        self.logprobs: list[torch.Tensor] = []
        self.entropies: list[torch.Tensor] = []
        self.done_N = torch.zeros(n, dtype=torch.bool, device=device)
        self.length_N = torch.zeros(n, dtype=torch.long, device=device)
        self.stopped_N = torch.zeros(n, dtype=torch.bool, device=device)

    def results(self, compute_entropy: bool) -> list[SampleResult]:
        rows = len(self.length_N)
        toks, lps = _by_row(self.tokens, rows), _by_row(self.logprobs, rows)
        ents = _by_row(self.entropies, rows) if compute_entropy and self.entropies else None
        out: list[SampleResult] = []
        lengths, stops = _values(self.length_N), _values(self.stopped_N)
        for i, (n, stopped) in enumerate(zip(lengths, stops, strict=True)):
            out.append(SampleResult(
                token_ids=tuple(int(t) for t in toks[i][:n]),
                logprobs=tuple(float(x) for x in lps[i][:n]),
                finish_reason="stop" if stopped else "length",
                entropies=tuple(float(x) for x in ents[i][:n]) if ents is not None else None,
            ))
        return out


class PyTorchEngine(WeightsVersion):
    """SamplingEngine over a Hugging Face causal LM (plain or PEFT) in this process."""

    def __init__(
        self,
        model: torch.nn.Module,
        *,
        eos_token_id: int | list[int],
        pad_token_id: int,
        seed: int = 0,
        shares_model_with_trainer: bool = False,
        weights_version: int = 0,
    ) -> None:
        self.model = model
        self.eos_ids = [eos_token_id] if isinstance(eos_token_id, int) else list(eos_token_id)
        self.pad_token_id = int(pad_token_id)
        self.device = next(model.parameters()).device
        self.generator = torch.Generator(device=self.device).manual_seed(seed)
        self.shares_model_with_trainer = shares_model_with_trainer
        self._version = weights_version
        self._modes = ModeSwitch(model)

    def load_weights(self, update: WeightUpdate) -> None:
        """Installs the update's tensors (strict names and shapes), or only the version if shared."""
        if not update.tensors and not self.shares_model_with_trainer:
            raise ValueError(
                f"WeightUpdate version {update.version} carries no tensors, but this engine does not share "
                "its model with the trainer: export the trainer's weights with tensors (split placement)"
            )
        self._version = install_update(self.model, update)

    def generate(
        self, prompt_ids_P: list[list[int]], num_samples: int, params: SamplingParams
    ) -> list[list[SampleResult]]:
        """results[P][num_samples]; all rows decoded in one batch."""
        check_request(prompt_ids_P, num_samples, params)
        rows_N = [list(p) for p in prompt_ids_P for _ in range(num_samples)]
        was_training = self.model.training
        self._modes.set(False)
        try:
            flat = self._decode(rows_N, params)
        finally:
            self._modes.set(was_training)
        return [flat[i * num_samples:(i + 1) * num_samples] for i in range(len(prompt_ids_P))]

    @torch.inference_mode()  # no autograd bookkeeping at all: every tensor of a decode ends as a Python list
    def _decode(self, rows_N: list[list[int]], params: SamplingParams) -> list[SampleResult]:
        ids_N_L, mask_N_L = left_pad(rows_N, self.pad_token_id, self.device)
        trace = _Trace(len(rows_N), self.device)
        eos_E = torch.tensor(self.eos_ids, device=self.device)
        position_N_L = (mask_N_L.cumsum(-1) - 1).clamp_min(0)
        past = None
        noise = NoiseAhead(self.generator)
        for step in range(params.max_tokens):
            with autocast_for(self.device):
                out = self.model(
                    input_ids=ids_N_L, attention_mask=mask_N_L, position_ids=position_N_L,
                    past_key_values=past, use_cache=True,
                )
            past = out.past_key_values
            token_N = self._sample_step(out.logits[:, -1, :], params, trace, noise)
            trace.length_N += (~trace.done_N).long()
            hit_eos_N = torch.isin(token_N, eos_E) & ~trace.done_N
            trace.stopped_N |= hit_eos_N
            trace.done_N |= hit_eos_N
            if bool(trace.done_N.all()) or step + 1 == params.max_tokens:
                break
            rows, _, vocab = out.logits.shape
            noise.start(rows, vocab, self.device)  # the next step's draw, while the next forward pass runs
            ids_N_L = token_N.masked_fill(trace.done_N, self.pad_token_id).unsqueeze(1)
            mask_N_L = torch.cat([mask_N_L, torch.ones_like(ids_N_L)], dim=1)
            position_N_L = position_N_L[:, -1:] + 1
        return trace.results(params.compute_entropy)

    def _sample_step(self, logits_N_V: torch.Tensor, params: SamplingParams, trace: _Trace,
                     noise: NoiseAhead) -> torch.Tensor:
        logp_N_V = filtered_logprobs(logits_N_V, params.temperature, params.top_p)
        probs_N_V = logp_N_V.exp()
        check_distribution(probs_N_V)
        rows, vocab = probs_N_V.shape
        token_N = (probs_N_V / noise.take(rows, vocab, self.device)).argmax(-1)  # torch.multinomial's draw
        trace.tokens.append(token_N)
        trace.logprobs.append(logp_N_V.gather(1, token_N[:, None]).squeeze(1).clamp_min(LOG_MIN_PROB))
        if params.compute_entropy:
            trace.entropies.append(entropy(logits_N_V, params.temperature))
        return token_N


def check_distribution(probs_N_V: torch.Tensor) -> None:
    """Refuse to draw from NaN, infinite or all-zero probabilities, as `torch.multinomial` does."""
    total_N = probs_N_V.sum(-1)
    bad = ~(torch.isfinite(total_N) & (total_N > 0))
    if bool(bad.any()):
        row = int(bad.nonzero()[0, 0])
        raise RuntimeError(
            f"sampling: row {row}'s next-token probabilities sum to {float(total_N[row])} (NaN, inf or 0): the "
            "model's logits are not finite, usually weights that diverged; lower [training] lr or set "
            "[optimizer] grad_clip_norm"
        )


def check_request(prompt_ids_P: list[list[int]], num_samples: int, params: SamplingParams) -> None:
    """Refuse a malformed sampling request with the reason (shared by the engines)."""
    if num_samples < 1:
        raise ValueError(f"num_samples must be >= 1, got {num_samples}")
    if params.max_tokens < 1:
        raise ValueError(f"SamplingParams.max_tokens must be >= 1, got {params.max_tokens}")
    if not 0.0 < params.top_p <= 1.0:
        raise ValueError(f"SamplingParams.top_p must be in (0, 1], got {params.top_p}")
    if params.temperature < 0:
        raise ValueError(f"SamplingParams.temperature must be >= 0, got {params.temperature}")
    if not prompt_ids_P or any(len(p) == 0 for p in prompt_ids_P):
        raise ValueError("generate() needs at least one prompt, and every prompt needs at least one token")


def eos_ids(model: torch.nn.Module, tokenizer: Tokenizer) -> list[int]:
    """EOS ids of the tokenizer and of the model's generation config (chat models often have two)."""
    gen: object = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    found: list[object] = [tokenizer.eos_token_id, *(cast("list[object]", gen) if isinstance(gen, list) else [gen])]
    return sorted({i for i in found if isinstance(i, int)})


def pad_id(tokenizer: Tokenizer) -> int:
    """The tokenizer's pad token id (`load_model_and_tokenizer` sets it to EOS when a tokenizer has none)."""
    return single_id(tokenizer.pad_token_id, "pad_token_id")


def sampler_of(model: torch.nn.Module, tokenizer: Tokenizer, *, seed: int,
               shares_model_with_trainer: bool = False) -> PyTorchEngine:
    """The engine sampling from `model` with its tokenizer's stop and pad ids (`shares_model_with_trainer`:
    the trainer updates this very model, so a weight sync is a version bump)."""
    return PyTorchEngine(model, eos_token_id=eos_ids(model, tokenizer), pad_token_id=pad_id(tokenizer),
                         seed=seed, shares_model_with_trainer=shares_model_with_trainer)


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


MIN_TEMPERATURE = 1e-7
MIN_PROB = 1e-12
LOG_MIN_PROB = math.log(MIN_PROB)


def tempered_logprobs(logits_N_V: torch.Tensor, temperature: float) -> torch.Tensor:
    """log softmax(logits / max(T, 1e-7)) in float32 (at T = 1 the division, an identity, is skipped: on a
    training micro-batch it is a pass over every position's whole vocabulary, and another in the backward)."""
    scaled_N_V = logits_N_V.float()
    if temperature != 1.0:
        scaled_N_V = scaled_N_V / max(float(temperature), MIN_TEMPERATURE)
    return torch.log_softmax(scaled_N_V, dim=-1)


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
