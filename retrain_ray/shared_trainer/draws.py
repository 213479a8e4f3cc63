"""One decode step's draws for every run in the shared decode, batched over runs, each run's tokens still
drawn from its own generator exactly as its engine's `torch.multinomial` draws them.

`torch.multinomial(probs_R_V, 1, generator=g)` on a CPU or GPU tensor is, in torch's own code (its fast path for
one sample), `argmax(probs_R_V / E_R_V)` with `E_R_V` a fresh `[R, V]` tensor filled by
`exponential_(generator=g)`. So each run fills its own rows of one shared noise buffer from its own
generator (one op per run: the same draws, in the same order, as its engine's call, and the generator
ends in the same state), and the division, argmax, log-prob gather and clamp run once over all rows.
tests/shared_trainer/test_draws.py checks the identity against `torch.multinomial` itself, bit for bit.

Runs at the same temperature and top-p share one computation of the distribution over all rows (row-wise
ops: a row's values do not depend on the others); a run with its own settings gets its own. The rows of
runs that no longer draw are computed too and never read (their noise is not refreshed, their generators
not touched): keeping the batch whole is cheaper than cutting it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from retrain_ray.engines.pytorch.engine import LOG_MIN_PROB, entropy, filtered_logprobs
from retrain_ray.engines.types import SamplingParams


@dataclass
class RunRows:
    """One run's rows in the decode (`start:stop` of the batch), its parameters and generator, and how
    many steps it has drawn (its trace is the decode's first `drawn` steps of its rows)."""

    start: int
    stop: int
    params: SamplingParams
    generator: torch.Generator
    drawn: int = 0
    active: bool = True


@dataclass(frozen=True)
class StepDraw:
    """One step's tokens, their log-probs and (when a drawing run asked) entropies, for every row (rows of
    runs that did not draw hold the pad token)."""

    token_N: torch.Tensor
    logprob_N: torch.Tensor
    entropy_N: torch.Tensor | None


class BatchedDraws:
    """The draws of one decode: a noise buffer of all rows, refilled each step run by run."""

    def __init__(self, spans: list[RunRows], rows: int, vocab: int, pad_token_id: int, device: torch.device) -> None:
        self.spans = spans
        self.pad_token_id = pad_token_id
        self.noise_N_V = torch.ones(rows, vocab, device=device)
        self._rows_of: dict[tuple[float, float], torch.Tensor] = {}

    def closed(self) -> None:
        """A run stopped drawing: the per-setting row masks are rebuilt at the next step."""
        self._rows_of = {}

    def draw(self, logits_N_V: torch.Tensor) -> StepDraw:
        """Every active run's next tokens in its rows (pad in the others), each from its own generator."""
        token_N = torch.full((logits_N_V.shape[0],), self.pad_token_id, dtype=torch.long, device=logits_N_V.device)
        logprob_N = torch.zeros(logits_N_V.shape[0], device=logits_N_V.device)
        entropy_N: torch.Tensor | None = None
        for span in self.spans:
            if span.active:
                self.noise_N_V[span.start:span.stop].exponential_(generator=span.generator)
                span.drawn += 1
        for key, rows_N in self._groups(logits_N_V.device).items():
            logp_N_V = filtered_logprobs(logits_N_V, *key)
            choice_N = (logp_N_V.exp() / self.noise_N_V).argmax(-1)
            picked_N = logp_N_V.gather(1, choice_N[:, None]).squeeze(1).clamp_min(LOG_MIN_PROB)
            token_N = torch.where(rows_N, choice_N, token_N)
            logprob_N = torch.where(rows_N, picked_N, logprob_N)
            if self._wants_entropy(key):
                values_N = entropy(logits_N_V, key[0])
                entropy_N = values_N if entropy_N is None else torch.where(rows_N, values_N, entropy_N)
        return StepDraw(token_N, logprob_N, entropy_N)

    def _groups(self, device: torch.device) -> dict[tuple[float, float], torch.Tensor]:
        """Each (temperature, top_p) of the active runs, with the mask of their rows (kept until one closes)."""
        if not self._rows_of:
            rows = self.noise_N_V.shape[0]
            for span in self.spans:
                if span.active:
                    key = (span.params.temperature, span.params.top_p)
                    mask = self._rows_of.setdefault(key, torch.zeros(rows, dtype=torch.bool, device=device))
                    mask[span.start:span.stop] = True
        return self._rows_of

    def _wants_entropy(self, key: tuple[float, float]) -> bool:
        return any(s.active and s.params.compute_entropy and (s.params.temperature, s.params.top_p) == key
                   for s in self.spans)
