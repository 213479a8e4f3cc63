"""The batched draw (shared_trainer/draws.py) is `torch.multinomial`'s, bit for bit: each run's tokens from its
own generator, which ends where its engine's call leaves it, whatever rows the other runs have."""

from __future__ import annotations

import pytest
import torch

from retrain_ray.engines.pytorch.engine import LOG_MIN_PROB, entropy, filtered_logprobs
from retrain_ray.engines.types import SamplingParams
from retrain_ray.shared_trainer.draws import BatchedDraws, RunRows

PARAMS = [SamplingParams(max_tokens=4, temperature=0.8), SamplingParams(max_tokens=4, temperature=1.1, top_p=0.7,
                                                                          compute_entropy=True),
          SamplingParams(max_tokens=4, temperature=0.8), SamplingParams(max_tokens=4, temperature=0.0)]
SIZES = [3, 5, 1, 4]


def _spans(seed: int) -> list[RunRows]:
    starts = [sum(SIZES[:i]) for i in range(len(SIZES))]
    return [RunRows(s, s + n, p, torch.Generator().manual_seed(seed + i))
            for i, (s, n, p) in enumerate(zip(starts, SIZES, PARAMS, strict=True))]


@pytest.mark.parametrize("threads", [1, 2])
def test_each_run_draws_what_multinomial_draws_from_its_generator(threads: int) -> None:
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        spans, engines = _spans(7), _spans(7)
        draws = BatchedDraws(spans, sum(SIZES), 50, pad_token_id=0, device=torch.device("cpu"))
        spans[2].active = False  # a run that has stopped: its rows get pad, its generator is not touched
        draws.closed()
        for step in range(3):
            logits_N_V = torch.randn(sum(SIZES), 50, generator=torch.Generator().manual_seed(step)) * 3
            got = draws.draw(logits_N_V)
            for span, engine in zip(spans, engines, strict=True):
                rows = slice(span.start, span.stop)
                if not span.active:
                    assert bool((got.token_N[rows] == 0).all())
                    continue
                p = span.params
                logp_R_V = filtered_logprobs(logits_N_V[rows], p.temperature, p.top_p)
                token_R = torch.multinomial(logp_R_V.exp(), 1, generator=engine.generator).squeeze(1)
                assert torch.equal(got.token_N[rows], token_R)
                expected = logp_R_V.gather(1, token_R[:, None]).squeeze(1).clamp_min(LOG_MIN_PROB)
                assert torch.equal(got.logprob_N[rows], expected)
                if p.compute_entropy:
                    assert got.entropy_N is not None
                    assert torch.equal(got.entropy_N[rows], entropy(logits_N_V[rows], p.temperature))
        for span, engine in zip(spans, engines, strict=True):
            assert torch.equal(span.generator.get_state(), engine.generator.get_state())
        assert [s.drawn for s in spans] == [3, 3, 0, 3]
    finally:
        torch.set_num_threads(before)
