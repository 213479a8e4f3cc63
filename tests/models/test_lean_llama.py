"""The torch-only Llama and light tokenizer of built-in models against transformers' on the same files.

On CPU the lean model does transformers' sdpa Llama op for op, so logits, KV-cache decoding and
gradients are compared bit for bit (`torch.equal`); where the lean model is compared with itself over
different shapes (cached decoding against one full forward) the matmuls reduce in another order, so
that comparison is `allclose` at 1e-5.
"""

from __future__ import annotations

import json
import pickle
import string

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import AutoModelForCausalLM, AutoTokenizer

from retrain_ray.backends.local import LoraSettings, PolicySettings, load_trainable_model
from retrain_ray.models.lean_llama import LeanLlamaForCausalLM
from retrain_ray.models.lean_loading import load_lean_model, load_lean_model_and_tokenizer, read_config
from retrain_ray.models.light_tokenizer import LightTokenizer


@pytest.fixture(scope="module")
def pair(tiny_dir):
    hf = AutoModelForCausalLM.from_pretrained(tiny_dir, local_files_only=True, dtype=torch.float32)
    return hf, load_lean_model(tiny_dir)


def _batch(seed: int = 0, rows: int = 3, width: int = 9):
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(4, 100, (rows, width), generator=gen)
    left = torch.ones_like(ids)
    left[0, :3] = 0
    left[1, :1] = 0
    right = torch.ones_like(ids)
    right[0, -4:] = 0
    right[2, -2:] = 0
    return ids, left, right


def test_same_parameter_names_order_and_state_dict(pair):
    hf, lean = pair
    assert [n for n, _ in lean.named_parameters()] == [n for n, _ in hf.named_parameters()]
    assert sorted(lean.state_dict()) == sorted(hf.state_dict())
    assert lean.lm_head.weight is lean.model.embed_tokens.weight
    for name, tensor in hf.state_dict().items():
        assert torch.equal(lean.state_dict()[name], tensor), name


def test_logits_equal_transformers_unpadded_left_and_right_padded(pair):
    hf, lean = pair
    ids, left, right = _batch()
    left_positions = (left.cumsum(-1) - 1).clamp_min(0)  # the engine's positions
    arange = torch.arange(ids.shape[1]).expand_as(ids)  # scoring's positions
    with torch.no_grad():
        for mask, positions in [(None, None), (torch.ones_like(ids), arange), (left, left_positions), (right, arange)]:
            want = hf(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=False).logits
            got = lean(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=False).logits
            assert torch.equal(got, want)


def test_cached_decoding_equals_transformers_and_a_full_forward(pair):
    hf, lean = pair
    ids, left, _ = _batch(seed=1)
    steps = torch.randint(4, 100, (ids.shape[0], 3), generator=torch.Generator().manual_seed(2))
    with torch.inference_mode():
        mask, positions = left, (left.cumsum(-1) - 1).clamp_min(0)
        a = hf(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True)
        b = lean(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True)
        decoded = [b.logits[:, -1]]
        for t in range(steps.shape[1]):
            token = steps[:, t : t + 1]
            mask = torch.cat([mask, torch.ones_like(token)], dim=1)
            positions = positions[:, -1:] + 1
            a = hf(input_ids=token, attention_mask=mask, position_ids=positions, past_key_values=a.past_key_values,
                   use_cache=True)
            b = lean(input_ids=token, attention_mask=mask, position_ids=positions,
                     past_key_values=b.past_key_values, use_cache=True)
            assert torch.equal(b.logits, a.logits)
            decoded.append(b.logits[:, -1])
        full = lean(input_ids=torch.cat([ids, steps], 1), attention_mask=mask,
                    position_ids=(mask.cumsum(-1) - 1).clamp_min(0), use_cache=False).logits
    assert b.past_key_values is not None and b.past_key_values.get_seq_length() == ids.shape[1] + steps.shape[1]
    for k, logits in enumerate(decoded):
        torch.testing.assert_close(logits, full[:, ids.shape[1] - 1 + k], atol=1e-5, rtol=0)


@pytest.mark.parametrize("checkpointing", [False, True])
def test_gradients_equal_transformers(tiny_dir, checkpointing):
    hf = AutoModelForCausalLM.from_pretrained(tiny_dir, local_files_only=True, dtype=torch.float32)
    lean = load_lean_model(tiny_dir)
    if checkpointing:
        lean.gradient_checkpointing_enable({"use_reentrant": False})
        assert lean.is_gradient_checkpointing
    ids, _, right = _batch(seed=3)
    positions = torch.arange(ids.shape[1]).expand_as(ids)
    for model in (hf, lean):
        model.train()
        logits = model(input_ids=ids, attention_mask=right, position_ids=positions, use_cache=False).logits
        logp = logits[:, :-1].log_softmax(-1).gather(-1, ids[:, 1:, None]).squeeze(-1)
        (-(logp * right[:, 1:]).sum() / right.sum()).backward()
    grads = {n: p.grad for n, p in hf.named_parameters()}
    for name, p in lean.named_parameters():
        assert p.grad is not None and torch.equal(p.grad, grads[name]), name


def test_save_pretrained_loads_in_transformers_with_equal_logits(tiny_dir, tmp_path):
    model, tok = load_lean_model_and_tokenizer(tiny_dir)
    with torch.no_grad():
        for p in model.parameters():  # trained weights, not the file's
            p.add_(0.01 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    hf = AutoModelForCausalLM.from_pretrained(tmp_path, local_files_only=True)
    hf_tok = AutoTokenizer.from_pretrained(tmp_path, local_files_only=True)
    ids, left, _ = _batch(seed=4)
    positions = (left.cumsum(-1) - 1).clamp_min(0)
    with torch.no_grad():
        want = hf(input_ids=ids, attention_mask=left, position_ids=positions).logits
        got = model(input_ids=ids, attention_mask=left, position_ids=positions).logits
    assert torch.equal(got, want)
    assert hf_tok.padding_side == "left" and hf_tok.encode("12 + 3", add_special_tokens=False) == tok.encode("12 + 3")
    assert json.loads((tmp_path / "config.json").read_text())["architectures"] == ["LlamaForCausalLM"]


def test_a_builtin_model_gets_the_lean_model_in_full_and_the_lean_lora_with_lora(tiny_cache, tiny_dir):
    from retrain_ray.models.lean_lora import LeanLoraModel

    full, tok = load_trainable_model("builtin:tiny", PolicySettings(finetune="full"), device="cpu", cache_dir=tiny_cache)
    assert isinstance(full, LeanLlamaForCausalLM) and isinstance(tok, LightTokenizer)
    assert all(p.requires_grad for p in full.parameters())
    lora, lora_tok = load_trainable_model("builtin:tiny", PolicySettings(finetune="lora", lora=LoraSettings(rank=2)),
                                          device="cpu", cache_dir=tiny_cache)
    assert isinstance(lora, LeanLoraModel) and isinstance(lora.llama, LeanLlamaForCausalLM)
    assert isinstance(lora_tok, LightTokenizer)
    # the same Llama as a model folder takes the lean path too; model_impl = "transformers" forces PEFT
    folder, _ = load_trainable_model(str(tiny_dir), PolicySettings(finetune="lora", lora=LoraSettings(rank=2)),
                                     device="cpu")
    assert isinstance(folder, LeanLoraModel)
    peft, hf_tok = load_trainable_model(str(tiny_dir), PolicySettings(finetune="lora", lora=LoraSettings(rank=2),
                                                                      model_impl="transformers"), device="cpu")
    assert type(peft).__name__ == "PeftModelForCausalLM" and not isinstance(hf_tok, LightTokenizer)


def test_a_config_the_lean_model_does_not_compute_is_refused_with_the_key(tiny_dir, tmp_path):
    raw = json.loads((tiny_dir / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**raw, "hidden_act": "gelu"}))
    with pytest.raises(ValueError, match="hidden_act = 'gelu'.*transformers"):
        read_config(tmp_path)


@pytest.fixture(scope="module")
def tokenizers(tiny_dir):
    hf = AutoTokenizer.from_pretrained(tiny_dir, local_files_only=True)
    return hf, LightTokenizer.from_folder(tiny_dir)


def test_light_tokenizer_special_tokens_match(tokenizers):
    hf, light = tokenizers
    for name in ("bos_token", "eos_token", "pad_token", "unk_token"):
        assert getattr(light, name) == getattr(hf, name)
        assert getattr(light, f"{name}_id") == getattr(hf, f"{name}_id")
    assert len(light) == len(hf) and light.padding_side == hf.padding_side == "left"
    assert light.chat_template is None and not getattr(hf, "chat_template", None)
    assert light.all_special_ids == sorted(hf.all_special_ids)
    copy = pickle.loads(pickle.dumps(light))  # split placement returns the sampler actor's tokenizer through Ray
    assert copy.encode("12 ab") == light.encode("12 ab") and copy.eos_token_id == light.eos_token_id


@settings(max_examples=60, deadline=None)
@given(text=st.text(alphabet=string.printable + "é€\u00a0", max_size=40),
       extra=st.lists(st.integers(0, 3), max_size=4))
def test_light_tokenizer_encodes_and_decodes_as_transformers(tokenizers, text, extra):
    hf, light = tokenizers
    ids = light.encode(text, add_special_tokens=False)
    assert ids == hf.encode(text, add_special_tokens=False)
    assert light.encode(text) == hf.encode(text)
    with_specials = extra + ids + extra
    for skip in (False, True):
        assert light.decode(with_specials, skip_special_tokens=skip) == hf.decode(with_specials, skip_special_tokens=skip)
        assert light.batch_decode([with_specials, ids], skip_special_tokens=skip) == \
            hf.batch_decode([with_specials, ids], skip_special_tokens=skip)
    assert light.convert_ids_to_tokens(with_specials) == hf.convert_ids_to_tokens(with_specials)
