"""The tinker backend against the LOCAL STAND-IN of the SDK (the service cannot be reached here):
real RL steps, retries and failure modes, checkpoint round trip, every SDK call under the throttle."""

from __future__ import annotations

import contextlib
import json

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from retrain_ray.backends.tinker import (
    ClipSettings,
    TinkerBackend,
    TinkerEngine,
    TinkerOptions,
    TinkerSession,
    build_tinker_policy,
    dual_clip_loss_and_grads,
    parse_tinker_options,
)
from retrain_ray.backends.tinker.backend import STATE_FILE, ppo_dual_clip_step
from retrain_ray.backends.tinker.loss import dual_clip_token_losses, rl_datums
from retrain_ray.backends.tinker.standin import StandinServiceClient
from retrain_ray.backends.types import TrainBatch
from retrain_ray.engines.types import SamplingParams, WeightUpdate

PARAMS = SamplingParams(max_tokens=4, temperature=1.0)
FAST = {"backoff_s": 0.0, "max_attempts": 3}


class CountingThrottle:
    """Wraps a throttle; counts holds and whether one is active (the stand-in checks on every call)."""

    def __init__(self, inner) -> None:
        self.inner, self.holds, self.active, self.unguarded = inner, 0, 0, []

    @contextlib.contextmanager
    def hold(self):
        with self.inner.hold():
            self.holds += 1
            self.active += 1
            try:
                yield
            finally:
                self.active -= 1

    def check(self, method: str) -> None:
        if self.active == 0:
            self.unguarded.append(method)


def _policy(tmp_path, throttle=None, faults=None, **options):
    session_opts = TinkerOptions(**{**FAST, **options})
    service = StandinServiceClient(store_dir=tmp_path / "store", faults=faults,
                                   on_call=throttle.check if throttle else None)
    session = TinkerSession(service, base_model="builtin:tiny", rank=4, throttle=throttle, options=session_opts)
    backend = TinkerBackend(session, clip=ClipSettings(), beta1=0.9, beta2=0.95, eps=1e-8, grad_clip_norm=1.0)
    return TinkerEngine(session), backend, session


def _batch(prompts, groups) -> TrainBatch:
    rows, lps, advs, plens = [], [], [], []
    for k, (p, r) in enumerate((p, r) for p, g in zip(prompts, groups, strict=True) for r in g):
        rows.append(list(p) + list(r.token_ids))
        lps.append([0.0] * len(p) + list(r.logprobs))
        advs.append([0.0] * len(p) + [1.0 if k % 2 else -1.0] * len(r.token_ids))
        plens.append(len(p))
    return TrainBatch(rows, lps, advs, plens)


def _lora_weights(session) -> dict[str, torch.Tensor]:
    model = session.training_client.model
    return {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}


def test_rl_steps_sample_train_and_hold_the_throttle_on_every_sdk_call(tmp_path, ray_4cpu_4gpu):
    from retrain_ray.actors.throttle import start_throttle
    from retrain_ray.throttle import ThrottleClient

    actor = start_throttle("tinker-test", "tinker", 1, namespace="retrain-ray-tests", lease_ttl_s=30.0)
    throttle = CountingThrottle(ThrottleClient(actor, "run-a", timeout_s=60.0))
    engine, backend, session = _policy(tmp_path, throttle)
    prompts = [[1, 5, 6], [1, 7, 8]]
    before = _lora_weights(session)
    for _step in range(3):
        engine.load_weights(backend.export_weights())
        groups = engine.generate(prompts, 4, PARAMS)
        assert [len(g) for g in groups] == [4, 4]
        assert all(len(r.token_ids) == len(r.logprobs) > 0 and all(x <= 0 for x in r.logprobs) for g in groups for r in g)
        result = backend.train_step(_batch(prompts, groups), lr=1e-2, weight_decay=0.0)
        assert result.metrics["tinker_retries"] == 0.0
    after = _lora_weights(session)
    assert backend.version == 3 and engine.weights_version == 2
    assert any(not torch.equal(before[n], after[n]) for n in before)
    counts = session.service_client.calls.counts
    assert counts["forward_backward"] == 3 and counts["optim_step"] == 3 and counts["sample"] == 6
    assert throttle.unguarded == []  # every SDK call happened inside a throttle hold
    assert throttle.holds >= sum(counts.values()) - counts["sample"]


def test_checkpoint_round_trip_stores_the_training_state_path(tmp_path):
    engine, backend, session = _policy(tmp_path)
    prompts = [[1, 5, 6]]
    backend.train_step(_batch(prompts, engine.generate(prompts, 2, PARAMS)), lr=1e-2, weight_decay=0.0)
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    backend.save_checkpoint(ckpt)
    record = json.loads((ckpt / STATE_FILE).read_text())
    assert "/state/" in record["state_path"] and "/sampler_weights/" in record["sampler_path"]
    saved = _lora_weights(session)
    for _ in range(2):
        backend.train_step(_batch(prompts, engine.generate(prompts, 2, PARAMS)), lr=1e-2, weight_decay=0.0)
    assert any(not torch.equal(saved[n], w) for n, w in _lora_weights(session).items())
    _, fresh, fresh_session = _policy(tmp_path)  # a new client, as after a restart
    fresh.load_checkpoint(ckpt)
    assert fresh.version == 1
    restored = _lora_weights(fresh_session)
    assert all(torch.equal(saved[n], restored[n]) for n in saved)
    assert fresh_session.training_client.optimizer.state  # optimizer moments came back too


def test_transient_failures_are_retried_and_counted(tmp_path):
    """Sampling is retried on 502/timeouts; state-changing calls only on 503 (the server ran nothing)."""
    faults = {"sample": ["502", "timeout"], "optim_step": ["503"], "forward_backward": ["503"]}
    engine, backend, session = _policy(tmp_path, faults=faults)
    groups = engine.generate([[1, 5], [1, 6]], 2, PARAMS)
    assert [len(g) for g in groups] == [2, 2]
    result = backend.train_step(_batch([[1, 5], [1, 6]], groups), lr=1e-3, weight_decay=0.0)
    assert result.metrics["tinker_retries"] == 4.0
    assert result.metrics["tinker_failed_samples"] == 0.0
    assert backend.version == 1


def test_persistent_sample_failure_is_an_error_by_default(tmp_path):
    engine, _, session = _policy(tmp_path, faults={"sample": ["502"] * 10})
    with pytest.raises(RuntimeError, match="on_sample_failure"):
        engine.generate([[1, 5]], 2, PARAMS)
    assert session.runtime_metrics()["tinker_failed_samples"] == 2.0


def test_persistent_sample_failure_can_be_an_empty_group(tmp_path):
    # 2 prompts x 3 attempts = 6 faults: both prompts fail in every round, so both groups come back empty.
    faults = {"sample": ["504"] * 6}
    engine, _, session = _policy(tmp_path, faults=faults, on_sample_failure="empty_group")
    groups = engine.generate([[1, 5], [1, 6]], 2, PARAMS)
    assert groups == [[], []]
    assert session.runtime_metrics()["tinker_failed_samples"] == 4.0
    assert session.counters.retries == 4
    assert engine.generate([[1, 5]], 2, PARAMS)[0]  # the service recovered: sampling works again


def test_non_transient_errors_are_not_retried(tmp_path):
    engine, _, session = _policy(tmp_path)
    with pytest.raises(ValueError, match="tensors"):
        engine.load_weights(WeightUpdate(version=1, tensors={"x": torch.zeros(1)}))
    assert session.counters.retries == 0


def test_custom_ppo_two_pass_gradient_equals_the_local_loss_gradient(tmp_path):
    engine, backend, session = _policy(tmp_path)
    backend.clip = ClipSettings(clip_eps=0.1, clip_eps_high=0.2, clip_ratio_c=3.0)
    prompts = [[1, 5, 6], [1, 7]]
    batch = _batch(prompts, engine.generate(prompts, 2, SamplingParams(max_tokens=4, temperature=1.5)))
    model = session.training_client.model
    datums = rl_datums(batch)
    ppo_dual_clip_step(backend, datums)  # gradient left in the stand-in model by the second pass
    remote = {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}
    model.zero_grad()
    new_T, old_T, adv_T = [], [], []
    for d in datums:
        ids = torch.tensor([d.model_input.to_ints()])
        logp = torch.log_softmax(model(input_ids=ids).logits[0].float(), -1)
        new_T.append(logp.gather(-1, d.loss_fn_inputs["target_tokens"].to_torch()[:, None]).squeeze(-1))
        old_T.append(d.loss_fn_inputs["logprobs"].to_torch())
        adv_T.append(d.loss_fn_inputs["advantages"].to_torch())
    new, old, adv = torch.cat(new_T).double(), torch.cat(old_T).double(), torch.cat(adv_T).double()
    loss_T, _ = dual_clip_token_losses(new, old, adv, backend.clip)
    mask = (adv != 0).double()
    ((loss_T * mask).sum() / mask.sum()).backward()
    for n, p in model.named_parameters():
        if p.requires_grad:
            torch.testing.assert_close(remote[n], p.grad, rtol=1e-4, atol=1e-6)


def test_dual_clip_exact_values():
    # r = e^0.5 = 1.6487 (A=+1: clipped at 1.2 -> -1.2), r = e^-1 = 0.3679 (A=-2: max(0.7358, 2*0.9=1.8) = 1.8,
    # dual clip c=1.5: min(3.0, 1.8) = 1.8), r = 1 (A=0: masked). Token-mean over 2 tokens: (-1.2 + 1.8)/2 = 0.3
    loss, grads, metrics = dual_clip_loss_and_grads(
        [[0.5, -1.0, 0.0]], [[0.0, 0.0, 0.0]], [[1.0, -2.0, 0.0]], ClipSettings(0.1, 0.2, 1.5)
    )
    assert loss == pytest.approx(0.3)
    assert grads == [[0.0, 0.0, 0.0]]  # both tokens clipped: no gradient
    assert metrics["ppo_clip_fraction"] == pytest.approx(1.0)


def test_dual_clip_without_ppo_clip_is_the_local_loss():
    # clip_eps = 0, clip_ratio_c = 3 (issue 22's fix: no PPO clip, the dual clip on top where A < 0):
    # r = e^0.5 (A=+1): -e^0.5; r = e^-1 (A=-2): 2e^-1 (under the dual bound 6); r = e^2 (A=-1): e^2 > 3, so 3.
    # (The old loss clamped r to [1, 1]: max(-e^0.5, -1) = -1 and max(2e^-1, 2) = 2.)
    import math

    from retrain_ray.algorithms.loss import policy_loss
    from retrain_ray.backends.tinker import loss_variant

    clip = ClipSettings(0.0, 0.0, 3.0)
    new, adv = [0.5, -1.0, 2.0], [1.0, -2.0, -1.0]
    loss, grads, metrics = dual_clip_loss_and_grads([new], [[0.0] * 3], [adv], clip)
    assert loss == pytest.approx((-math.exp(0.5) + 2 * math.exp(-1.0) + 3.0) / 3, rel=1e-12)
    assert grads[0] == pytest.approx([-math.exp(0.5) / 3, 2 * math.exp(-1.0) / 3, 0.0], rel=1e-12)
    assert metrics["ppo_clip_fraction"] == 0.0
    assert loss_variant(clip) == "ppo_dual_clip"  # the service's plain loss would drop the dual clip
    local = policy_loss(torch.tensor([new], dtype=torch.float64), torch.zeros(1, 3, dtype=torch.float64),
                        torch.tensor([adv], dtype=torch.float64), torch.ones(1, 3), clip_ratio_c=3.0)
    assert float(local.loss_sum) / local.num_action_tokens == pytest.approx(loss, rel=1e-12)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.floats(-0.05, 0.05), st.floats(-3, 3)), min_size=1, max_size=12))
def test_dual_clip_inside_the_trust_region_is_the_plain_surrogate(pairs):
    delta = [d for d, _ in pairs]
    adv = [a if abs(a) > 1e-3 else 1.0 for _, a in pairs]
    loss, grads, _ = dual_clip_loss_and_grads([delta], [[0.0] * len(delta)], [adv], ClipSettings(0.2, 0.0, 10.0))
    import math

    expected = -sum(math.exp(d) * a for d, a in zip(delta, adv, strict=True)) / len(delta)
    assert loss == pytest.approx(expected, rel=1e-9, abs=1e-12)
    assert grads[0] == pytest.approx([-math.exp(d) * a / len(delta) for d, a in zip(delta, adv, strict=True)])


def test_options_are_validated_with_hints():
    assert parse_tinker_options({}).on_sample_failure == "error"
    with pytest.raises(ValueError, match="did you mean 'on_sample_failure'"):
        parse_tinker_options({"on_sample_failur": "error"})
    with pytest.raises(ValueError, match="empty_group"):
        parse_tinker_options({"on_sample_failure": "ignore"})


def test_build_tinker_policy_from_config(tmp_path):
    from retrain_ray.config import RetrainConfig

    cfg = RetrainConfig.model_validate({"backend": {"backend": "tinker"}, "training": {"clip_eps": 0.2},
                                        "model": {"model": "builtin:tiny", "lora_rank": 4}})
    engine, backend, tokenizer = build_tinker_policy(cfg, service_client=StandinServiceClient(store_dir=tmp_path))
    assert backend.capabilities.checkpoint_resume_mode == "exact" and backend.capabilities.resume_runtime_dependent
    assert backend.clip.clip_eps == 0.2 and tokenizer.eos_token_id is not None
    assert engine.generate([tokenizer.encode("12", add_special_tokens=False)], 2, PARAMS)[0]


@pytest.mark.parametrize(("method", "kind"), [("forward_backward", "502-applied"), ("forward_backward", "timeout-applied"),
                                              ("optim_step", "504-applied")])
def test_a_call_the_server_applied_is_never_applied_twice(tmp_path, method, kind):
    """The server applies the call, the answer is lost: no retry, a clear error, and a resume from the
    checkpoint then gives exactly the weights of a run that never failed."""
    from retrain_ray.util.retry import AmbiguousCallError

    prompts = [[1, 5], [1, 6]]
    engine, backend, session = _policy(tmp_path, faults={method: [kind]})
    batch = _batch(prompts, engine.generate(prompts, 2, PARAMS))
    backend.save_checkpoint(_mkdir(tmp_path / "ckpt"))
    with pytest.raises(AmbiguousCallError, match=f"tinker {method}.*not retried"):
        backend.train_step(batch, lr=1e-2, weight_decay=0.0)
    assert session.service_client.calls.counts[method] == 1  # no retry: applied once, not twice
    backend.load_checkpoint(tmp_path / "ckpt")
    backend.train_step(batch, lr=1e-2, weight_decay=0.0)
    resumed = _lora_weights(session)
    backend.load_checkpoint(tmp_path / "ckpt")  # the same step again, with no fault at all
    backend.train_step(batch, lr=1e-2, weight_decay=0.0)
    clean = _lora_weights(session)
    assert all(torch.equal(clean[n], resumed[n]) for n in clean)
    assert backend.version == 1


def _mkdir(path):
    path.mkdir(parents=True)
    return path
