"""Warm-start options of the original: `sft_loss_fn = "importance_sampling"` (its -exp(log p) loss against zero
logprobs, on the local backend and the tinker stand-in) and `sft_batch_order = "length_asc"`."""

from __future__ import annotations

import math

import pytest

from retrain_ray.backends.types import TrainBatch
from retrain_ray.config import ConfigError, RetrainConfig
from retrain_ray.config.build import build_config
from retrain_ray.data.types import Example
from retrain_ray.run.trainers.sft import SFTRow


class _Tok:
    eos_token_id = 0

    def encode(self, text, add_special_tokens=False):
        return [ord(c) for c in text]


def _warm_start(examples, **training):
    from retrain_ray.engines.types import SamplingParams
    from retrain_ray.run.loop import RunComponents
    from retrain_ray.run.trainers.sft import WarmStart

    cfg = RetrainConfig.model_validate({"training": {"seed": 3, "max_tokens": 64, **training}})
    parts = RunComponents(None, None, _Tok(), None, examples, [], str, None, None, False, None, None)
    return WarmStart(cfg, parts, encode=lambda prompt: [ord(c) for c in prompt], sampling=SamplingParams(max_tokens=64))


def test_length_asc_walks_the_task_shortest_first_every_pass():
    # prompt + answer + EOS lengths: 6, 3, 4, 5, 3, 4 -> by length, equal lengths in order: 1, 4, 2, 5, 3, 0
    examples = [Example(p, "0") for p in ("aaaa", "b", "cc", "ddd", "e", "ff")]
    ws = _warm_start(examples, sft_batch_order="length_asc")
    assert [e.prompt for e in ws.examples(0, 4)] == ["b", "e", "cc", "ff"]
    assert [e.prompt for e in ws.examples(1, 4)] == ["ddd", "aaaa", "b", "e"]  # the next pass starts over


def test_length_asc_orders_sft_file_rows_whatever_the_bucket_size():
    for bucket in (0, 2):
        ws = _warm_start([Example("x", "0")], sft_batch_order="length_asc", sft_length_bucket_size=bucket)
        ws.rows = [SFTRow([1] * n, 0) for n in (7, 2, 9, 2, 5)]
        assert ws.indices(0, 5, 5) == [1, 3, 4, 0, 2]


def test_sft_values_are_checked():
    for key, bad in (("sft_loss_fn", "kl"), ("sft_batch_order", "length_desc")):
        with pytest.raises(ConfigError) as info:
            build_config({"training": {key: bad}})
        assert f"training.{key}" in info.value.locations
    for value in ("auto", "cross_entropy", "importance_sampling"):
        build_config({"training": {"sft_loss_fn": value}})
    with pytest.raises(ConfigError) as info:
        build_config({"backend": {"backend": "prime_rl"}, "training": {"sft_loss_fn": "importance_sampling"}})
    assert "training.sft_loss_fn" in info.value.locations


def test_the_warm_start_batch_carries_the_loss():
    from retrain_ray.run.trainers.sft import sft_loss

    assert [sft_loss(v) for v in ("auto", "cross_entropy", "importance_sampling")] == \
        ["cross_entropy", "cross_entropy", "importance_sampling"]


def _one_target(loss: str) -> TrainBatch:
    """Prompt [1, 5, 6], one target token: the mean over targets is that token's own term."""
    return TrainBatch([[1, 5, 6, 7]], [[0.0] * 4], [[0.0, 0.0, 0.0, 1.0]], [3], sft_loss=loss)  # pyright: ignore[reportArgumentType]


def test_local_importance_sampling_is_minus_p_and_trains(tiny_cache):
    from retrain_ray.backends.local import PolicySettings, build_shared_policy

    def backend():
        return build_shared_policy("builtin:tiny", PolicySettings(finetune="full"), device="cpu", cache_dir=tiny_cache)[1]

    ce = backend().sft_step(_one_target("cross_entropy"), lr=0.0, weight_decay=0.0).loss  # -log p
    trained = backend()
    losses = [trained.sft_step(_one_target("importance_sampling"), lr=1e-2, weight_decay=0.0).loss for _ in range(4)]
    assert losses[0] == pytest.approx(-math.exp(-ce), rel=1e-5)  # -exp(log p - 0): the same p, its own loss
    assert losses[-1] < losses[0]  # p of the target grows


def test_tinker_importance_sampling_sends_zero_logprobs(tmp_path):
    from retrain_ray.backends.tinker import ClipSettings, TinkerBackend, TinkerOptions, TinkerSession
    from retrain_ray.backends.tinker.loss import sft_datums
    from retrain_ray.backends.tinker.standin import StandinServiceClient

    datums, count = sft_datums(_one_target("importance_sampling"))
    assert count == 1 and datums[0].loss_fn_inputs["logprobs"].tolist() == [0.0, 0.0, 0.0]
    assert datums[0].loss_fn_inputs["advantages"].tolist() == [0.0, 0.0, 1.0]

    def backend(name):
        service = StandinServiceClient(store_dir=tmp_path / name)
        session = TinkerSession(service, base_model="builtin:tiny", rank=4, throttle=None,
                                options=TinkerOptions(backoff_s=0.0, max_attempts=3))
        return TinkerBackend(session, clip=ClipSettings(), beta1=0.9, beta2=0.95, eps=1e-8, grad_clip_norm=1.0)

    ce = backend("ce").sft_step(_one_target("cross_entropy"), lr=0.0, weight_decay=0.0).loss
    ratio = backend("is").sft_step(_one_target("importance_sampling"), lr=0.0, weight_decay=0.0).loss
    assert ratio == pytest.approx(-math.exp(-ce), rel=1e-5)
