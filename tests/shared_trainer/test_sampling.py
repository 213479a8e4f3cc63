"""Sampling from the shared trainer's one copy: a run's samples do not depend on the runs sharing its decode,
and they are its own `PyTorchEngine`'s samples over its own solo model with the same seed."""

from __future__ import annotations

import threading

import pytest
import torch
from batches import credited_batch
from test_equivalence import VOCAB

from retrain_ray.backends.local import LoraSettings, PolicySettings, build_shared_policy
from retrain_ray.engines.types import SampleResult, SamplingParams
from retrain_ray.shared_trainer import CoalescingTrainer, SampleRequest, SharedTrainerError, StepRequest

LOGPROB_TOLERANCE = 1e-5
PARAMS = [SamplingParams(max_tokens=10, temperature=0.9, compute_entropy=True),
          SamplingParams(max_tokens=6, temperature=0.7, top_p=0.9),
          SamplingParams(max_tokens=10, temperature=0.9),  # as r0: one distribution computed for both
          SamplingParams(max_tokens=3, temperature=1.2, top_p=0.95, compute_entropy=True)]


def _settings(i: int) -> PolicySettings:
    return PolicySettings(lora=LoraSettings(rank=(4, 8, 2, 8)[i], alpha=(0.0, 16.0)[i % 2]), seed=40 + i)


def _prompts(i: int) -> list[list[int]]:
    return [[5 + i, 7, 9, 11][: 2 + i % 3], [12 + i], [3, 4 + i, 30, 31, 32]]


def _request(i: int) -> SampleRequest:
    return SampleRequest(_prompts(i), 3, PARAMS[i], seed=_settings(i).seed)


def _trained(trainer, indices: list[int]):
    """Members with adapters moved away from their start (a few steps at a large lr), so routing matters."""
    for i in indices:
        trainer.add_run(f"r{i}", _settings(i))
    for step in range(3):
        trainer.train_step({f"r{i}": StepRequest(credited_batch(100 * step + i, vocab=VOCAB), lr=5e-2)
                            for i in indices})
    return trainer


def _difference(a: list[list[SampleResult]], b: list[list[SampleResult]]) -> float:
    """The largest logprob/entropy difference; fails unless every token and finish reason is the same."""
    largest = 0.0
    for row_a, row_b in zip(a, b, strict=True):
        for x, y in zip(row_a, row_b, strict=True):
            assert (x.token_ids, x.finish_reason) == (y.token_ids, y.finish_reason)
            values = [*zip(x.logprobs, y.logprobs, strict=True), *zip(x.entropies or (), y.entropies or (), strict=True)]
            largest = max([largest, *(abs(u - v) for u, v in values)])
            assert (x.entropies is None) == (y.entropies is None)
    return largest


def test_a_run_samples_the_same_alone_and_in_a_batch_of_four(shared):
    together = _trained(shared(), [0, 1, 2, 3])
    alone = _trained(shared(), [1])
    batched = together.generate({f"r{i}": _request(i) for i in (3, 1, 0, 2)})
    solo = alone.generate({"r1": _request(1)})
    assert _difference(batched["r1"], solo["r1"]) < LOGPROB_TOLERANCE
    # each run's own parameters held in the shared decode: max_tokens, entropies
    assert all(len(s.token_ids) <= 3 and s.entropies is not None for row in batched["r3"] for s in row)
    assert all(s.entropies is None for row in batched["r1"] for s in row)
    assert [len(row) for row in batched["r0"]] == [3, 3, 3]
    # and the adapters matter: the same prompts and seed under another run's adapter give other log-probs
    swapped = together.generate({"r0": SampleRequest(_prompts(1), 3, PARAMS[1], seed=_settings(1).seed)})
    assert swapped["r0"] != solo["r1"]


def test_the_shared_decode_samples_what_the_runs_own_engine_samples(shared, tiny_cache, tmp_path):
    trainer = _trained(shared(), [0, 1, 2, 3])
    trainer.save_checkpoint("r0", tmp_path)
    engine, backend, _ = build_shared_policy("builtin:tiny", _settings(0), device="cpu", cache_dir=tiny_cache)
    backend.load_checkpoint(tmp_path)
    for _ in range(2):  # the run's generator advances across calls as its engine's does
        shared_out = trainer.generate({f"r{i}": _request(i) for i in range(4)})["r0"]
        own = engine.generate(_prompts(0), 3, PARAMS[0])
        assert _difference(shared_out, own) < LOGPROB_TOLERANCE
    assert torch.equal(trainer.streams.generator("r0").get_state(), engine.generator.get_state())


def test_coalesced_callers_share_one_decode_and_get_their_own_results(shared):
    front = CoalescingTrainer(_trained(shared(), [0, 1, 2]), window_s=30.0)  # only "everyone is here" releases it
    reference = _trained(shared(), [0, 1, 2]).generate({f"r{i}": _request(i) for i in range(3)})
    results: dict[str, object] = {}

    def call(i: int) -> None:
        request = _request(i)
        results[f"r{i}"] = front.generate(f"r{i}", request.prompt_ids_P, request.num_samples, request.params,
                                          seed=request.seed, timeout_s=120)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=150)
    assert front.decode_sizes == [3]
    assert all(_difference(results[r], reference[r]) < LOGPROB_TOLERANCE for r in reference)


def test_a_bad_or_unknown_caller_gets_its_own_error(shared):
    front = CoalescingTrainer(_trained(shared(), [0]), window_s=0.05)
    with pytest.raises(ValueError, match="run 'r0': num_samples must be >= 1"):
        front.generate("r0", [[5, 6]], 0, PARAMS[0], seed=1)
    with pytest.raises(SharedTrainerError, match="'ghost' is not a member"):
        front.generate("ghost", [[5, 6]], 1, PARAMS[0], seed=1)
    assert len(front.generate("r0", [[5, 6]], 2, PARAMS[2], seed=1)[0]) == 2
