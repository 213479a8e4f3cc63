"""The next decode step's sampling noise, drawn on a helper thread while the model's forward pass runs.

`torch.multinomial(probs_N_V, 1, generator=g)` is `argmax(probs_N_V / E_N_V)` with `E_N_V` a fresh tensor
filled by `exponential_(generator=g)` (shared_trainer/draws.py has the identity and its test). The noise
does not depend on the logits, so the engine can draw step t+1's noise while step t+1's forward pass runs:
on a bf16 SmolLM2 decode the draw (one exponential per vocabulary entry per row, serial in torch's CPU
generator) was about a sixth of the decode. The generator is called in the same order with the same
shapes as before, and only for steps that are drawn, so tokens and the generator's final state are bit
for bit `torch.multinomial`'s. On a GPU the draw is asynchronous already and stays inline.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor

import torch

NOISE_TIMEOUT_S = 120.0
"""A draw of a few million exponentials takes milliseconds; this only bounds a wedged helper thread."""

_POOL = ThreadPoolExecutor(max_workers=1, thread_name_prefix="retrain-ray-noise")


def draw_noise(rows: int, vocab: int, generator: torch.Generator, device: torch.device) -> torch.Tensor:
    """What `torch.multinomial` draws for one sample of each of `rows` rows over `vocab` entries."""
    return torch.empty(rows, vocab, device=device).exponential_(generator=generator)


class NoiseAhead:
    """One decode's noise: `start` begins the next step's draw, `take` returns it (drawing inline if none)."""

    def __init__(self, generator: torch.Generator) -> None:
        self.generator = generator
        self._pending: Future[torch.Tensor] | None = None

    def start(self, rows: int, vocab: int, device: torch.device) -> None:
        if device.type != "cpu":
            return
        self._pending = _POOL.submit(draw_noise, rows, vocab, self.generator, device)

    def take(self, rows: int, vocab: int, device: torch.device) -> torch.Tensor:
        pending, self._pending = self._pending, None
        if pending is None:
            return draw_noise(rows, vocab, self.generator, device)
        noise_N_V = pending.result(timeout=NOISE_TIMEOUT_S)
        if noise_N_V.shape != (rows, vocab):
            raise RuntimeError(f"noise drawn for {tuple(noise_N_V.shape)} but the step has {(rows, vocab)}")
        return noise_N_V
