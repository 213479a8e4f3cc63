"""PyTorch sampling engine: shapes, left padding, finish reasons, exact logprobs, determinism."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from retrain_ray.engines import NaiveEngine, PyTorchEngine, SamplingEngine, SamplingParams, WeightUpdate
from retrain_ray.engines.pytorch.engine import entropy, filtered_logprobs, left_pad, token_logprobs
from retrain_ray.models import encode_prompt


def _engine(tiny, seed=0, **kw):
    model, tok = tiny
    return PyTorchEngine(model, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, seed=seed, **kw)


PROMPTS = ["123", "a much longer prompt", "7"]


def _full_forward_logprobs(model, prompt, result, temperature, top_p):
    ids = torch.tensor([prompt + list(result.token_ids)])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0]
    n = len(prompt)
    return token_logprobs(logits[n - 1 : -1], ids[0, n:], temperature, top_p)


def test_protocol_and_shapes(tiny):
    engine = _engine(tiny)
    assert isinstance(engine, SamplingEngine)
    prompts = [encode_prompt(tiny[1], p) for p in PROMPTS]
    out = engine.generate(prompts, 4, SamplingParams(max_tokens=6, compute_entropy=True))
    assert [len(g) for g in out] == [4, 4, 4]
    for group in out:
        for r in group:
            assert 1 <= len(r.token_ids) <= 6
            assert len(r.logprobs) == len(r.entropies) == len(r.token_ids)
            assert all(lp <= 0 for lp in r.logprobs)


@pytest.mark.parametrize(("temperature", "top_p"), [(1.0, 1.0), (0.7, 0.9), (1.3, 0.5)])
def test_logprobs_match_full_forward(tiny, temperature, top_p):
    model, tok = tiny
    prompts = [encode_prompt(tok, p) for p in PROMPTS]
    out = _engine(tiny, seed=3).generate(prompts, 3, SamplingParams(max_tokens=12, temperature=temperature, top_p=top_p))
    for prompt, group in zip(prompts, out, strict=True):
        for r in group:
            expected = _full_forward_logprobs(model, prompt, r, temperature, top_p)
            torch.testing.assert_close(torch.tensor(r.logprobs), expected, atol=1e-5, rtol=0)


def test_left_padding_does_not_change_a_row(tiny):
    """A short prompt batched with a long one samples the same tokens as alone (same RNG draws)."""
    _, tok = tiny
    short = encode_prompt(tok, "42")
    alone = _engine(tiny, seed=9).generate([short], 1, SamplingParams(max_tokens=10))[0][0]
    long = encode_prompt(tok, "a long prompt to force padding")
    together = _engine(tiny, seed=9).generate([short, long], 1, SamplingParams(max_tokens=10))[0][0]
    # The first token is drawn from row 0's distribution with the same generator draw.
    assert together.token_ids[0] == alone.token_ids[0]
    torch.testing.assert_close(together.logprobs[0], alone.logprobs[0], atol=1e-5, rtol=0)
    ids, mask = left_pad([short, long], tok.pad_token_id, torch.device("cpu"))
    assert ids[0, : len(long) - len(short)].eq(tok.pad_token_id).all()
    assert mask[0].tolist() == [0] * (len(long) - len(short)) + [1] * len(short)


@pytest.mark.parametrize(("eos_bias", "reason"), [(50.0, "stop"), (-1e4, "length")])
def test_finish_reasons_stop_and_length(tiny, eos_bias, reason):
    model, tok = tiny
    prompts = [encode_prompt(tok, p) for p in PROMPTS]
    # Make EOS the argmax (a huge bias on its logit), or never sampled.
    bias = torch.zeros(len(tok))
    bias[tok.eos_token_id] = eos_bias
    handle = model.lm_head.register_forward_hook(lambda m, i, o: o + bias)
    try:
        groups = _engine(tiny).generate(prompts, 2, SamplingParams(max_tokens=5))
    finally:
        handle.remove()
    for r in (r for g in groups for r in g):
        assert r.finish_reason == reason
        if reason == "stop":
            assert r.token_ids == (tok.eos_token_id,)
        else:
            assert len(r.token_ids) == 5 and tok.eos_token_id not in r.token_ids


def test_seeded_determinism(tiny):
    prompts = [encode_prompt(tiny[1], p) for p in PROMPTS]
    params = SamplingParams(max_tokens=8, temperature=0.8, top_p=0.95)
    a = _engine(tiny, seed=5).generate(prompts, 4, params)
    b = _engine(tiny, seed=5).generate(prompts, 4, params)
    c = _engine(tiny, seed=6).generate(prompts, 4, params)
    assert a == b
    assert a != c


def test_restores_training_mode(tiny):
    model, _ = tiny
    model.train()
    _engine(tiny).generate([[5, 6]], 1, SamplingParams(max_tokens=2))
    assert model.training
    model.eval()


def test_naive_engine_same_distribution(tiny):
    model, tok = tiny
    prompt = encode_prompt(tok, "99")
    r = NaiveEngine(model, eos_token_id=tok.eos_token_id, seed=1).generate([prompt], 2, SamplingParams(max_tokens=6))
    for res in r[0]:
        expected = _full_forward_logprobs(model, prompt, res, 1.0, 1.0)
        torch.testing.assert_close(torch.tensor(res.logprobs), expected, atol=1e-5, rtol=0)


def test_load_weights_strict_and_version(tiny):
    engine = _engine(tiny)
    with pytest.raises(ValueError, match="does not share"):
        engine.load_weights(WeightUpdate(version=1))
    with pytest.raises(KeyError, match="unknown"):
        engine.load_weights(WeightUpdate(version=1, tensors={"nope.weight": torch.zeros(1)}))
    shared = _engine(tiny, shares_model_with_trainer=True)
    shared.load_weights(WeightUpdate(version=4))
    assert shared.weights_version == 4


@pytest.mark.parametrize("bad", [SamplingParams(max_tokens=0), SamplingParams(max_tokens=2, top_p=0.0)])
def test_bad_params_rejected(tiny, bad):
    with pytest.raises(ValueError, match="SamplingParams"):
        _engine(tiny).generate([[5]], 1, bad)


# ---- the distribution math, exactly -------------------------------------------------------------


def test_top_p_filter_exact_values():
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05]])
    logp = filtered_logprobs(probs.log(), 1.0, 0.7)
    # cumsum - p = [0, .5, .8, .95] -> keep tokens 0 and 1 (0.8 > 0.7 drops token 2)
    torch.testing.assert_close(logp.exp(), torch.tensor([[0.625, 0.375, 0.0, 0.0]]))
    tokens = torch.tensor([1])
    torch.testing.assert_close(token_logprobs(probs.log(), tokens, 1.0, 0.7), torch.tensor([0.375]).log())
    dropped = token_logprobs(probs.log(), torch.tensor([3]), 1.0, 0.7)
    torch.testing.assert_close(dropped, torch.tensor([1e-12]).log())


def test_temperature_and_entropy_exact():
    logits = torch.tensor([[2.0, 0.0]])
    p0 = 1 / (1 + torch.exp(torch.tensor(-4.0)))  # T = 0.5 doubles the logit gap
    torch.testing.assert_close(filtered_logprobs(logits, 0.5, 1.0).exp()[0, 0], p0)
    expected_h = -(p0 * p0.log() + (1 - p0) * (1 - p0).log())
    torch.testing.assert_close(entropy(logits, 0.5)[0], expected_h)


@settings(max_examples=40, deadline=None)
@given(
    logits=st.lists(st.floats(-8, 8), min_size=2, max_size=12),
    temperature=st.floats(0.05, 3.0),
    top_p=st.floats(0.05, 1.0),
)
def test_filtered_distribution_properties(logits, temperature, top_p):
    z = torch.tensor([logits])
    p = filtered_logprobs(z, temperature, top_p).exp()[0]
    assert abs(float(p.sum()) - 1.0) < 1e-5
    tempered = torch.softmax(z[0] / temperature, -1)
    # the filtered mode is a mode of the tempered distribution (up to rounding: near-tied logits)
    assert float(tempered.max() - tempered[int(p.argmax())]) <= 1e-6
    kept = p > 0
    # the kept set holds at least top_p of the tempered mass, and dropping its smallest member would not
    assert float(tempered[kept].sum()) >= min(top_p, 1.0) - 1e-5
    if kept.sum() > 1:
        assert float(tempered[kept].sum() - tempered[kept].min()) <= top_p + 1e-5


@pytest.mark.parametrize("rows", [1, 3])
def test_noise_drawn_ahead_gives_multinomials_tokens_and_generator_state(rows):
    """The engine draws step t+1's noise on a helper thread while step t+1's forward runs
    (engines/pytorch/noise.py): the tokens are `torch.multinomial`'s, and the generator ends where it would."""
    from retrain_ray.engines.pytorch.noise import NoiseAhead

    cpu = torch.device("cpu")
    probs = torch.rand(rows, 50).pow(4)
    ours, reference = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    expected = [torch.multinomial(probs, 1, generator=reference).squeeze(1) for _ in range(4)]
    noise, drawn = NoiseAhead(ours), []
    for step in range(4):
        drawn.append((probs / noise.take(rows, 50, cpu)).argmax(-1))
        if step < 3:
            noise.start(rows, 50, cpu)
    assert all(torch.equal(a, b) for a, b in zip(drawn, expected, strict=True))
    assert torch.equal(ours.get_state(), reference.get_state())


def test_sampling_from_nan_logits_names_the_row_and_the_fix():
    from retrain_ray.engines.pytorch.engine import check_distribution

    probs = torch.rand(3, 10)
    check_distribution(probs)
    probs[1, 4] = float("nan")
    with pytest.raises(RuntimeError, match=r"row 1's .* lower \[training\] lr"):
        check_distribution(probs)
    with pytest.raises(RuntimeError, match="row 0"):
        check_distribution(torch.zeros(2, 10))
