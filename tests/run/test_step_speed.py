"""Issue 13's step work changes speed, not results: the optimised RL step (inference-mode decoding,
flat train/eval switching, one-call padding, no activation checkpointing on CPU, and for a built-in model
the lean torch-only Llama with the lean LoRA instead of transformers' Llama with PEFT) samples the same
tokens with bit-identical log-probabilities and makes the bit-identical update of the step before it
(kept in benchmarks/step_throughput.py as LegacyEngine / LegacyBackend on transformers + PEFT, with
torch's AdamW where the current trainer has PlainAdamW), on issue 13's configuration (builtin:tiny, LoRA
r8, 4 x 8, 4 tokens); and a full fine-tune's RL steps on the lean torch-only Llama are bitwise those on
transformers' Llama."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from retrain_ray.engines import SamplingParams
from retrain_ray.engines.weights import ModeSwitch

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "step_throughput.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("step_throughput", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _steps_agree(bench, a, b, steps: int, keys: tuple[str, ...]) -> int:
    """Steps both loops `a` and `b` (loop, state) take in lockstep; each trained row agrees on `keys`.
    Returns how many steps trained (a step with no signal logs a row with trained = false in both)."""
    trained = 0
    for step in range(steps):
        row_a, row_b = bench.step_once(*a, step), bench.step_once(*b, step)
        assert row_a["trained"] == row_b["trained"]
        if row_a["trained"]:
            trained += 1
            for key in keys:
                assert row_a[key] == row_b[key], key
    return trained


def test_optimised_step_matches_the_previous_step(bench, tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    from retrain_ray.models.lean_lora import LeanLoraModel

    current, cur_state = bench.issue_step_loop(tmp_path / "a", legacy=False)
    legacy, old_state = bench.issue_step_loop(tmp_path / "b", legacy=True, checkpointing=True,  # its default
                                              transformers_model=True)
    assert type(legacy.parts.engine) is bench.LegacyEngine and type(legacy.parts.backend) is bench.LegacyBackend
    assert isinstance(current.parts.backend.model, LeanLoraModel)
    assert type(legacy.parts.backend.model).__name__ == "PeftModelForCausalLM"
    trained = _steps_agree(bench, (current, cur_state), (legacy, old_state), 4,
                           ("loss", "grad_norm", "optimizer/logical_batch_sha256"))
    assert trained >= 3  # the parity reward gives (nearly) every step a signal, so updates are compared

    prompts = [[1, 10, 11, 12], [1, 13, 14]]
    params = SamplingParams(max_tokens=4, temperature=1.0)
    new_groups = current.parts.engine.generate(prompts, 8, params)
    old_groups = legacy.parts.engine.generate(prompts, 8, params)
    for new_group, old_group in zip(new_groups, old_groups, strict=True):
        for new, old in zip(new_group, old_group, strict=True):
            assert new.token_ids == old.token_ids and new.logprobs == old.logprobs
    new_params = dict(current.parts.backend.model.named_parameters())
    for name, old_param in legacy.parts.backend.model.named_parameters():
        assert torch.equal(new_params[name], old_param), name


def test_full_finetune_steps_on_the_lean_llama_equal_transformers_llama(bench, tmp_path):
    from retrain_ray.models.lean_llama import LeanLlamaForCausalLM

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    lean, lean_state = bench.issue_step_loop(tmp_path / "a", legacy=False, finetune="full")
    hf, hf_state = bench.issue_step_loop(tmp_path / "b", legacy=True, checkpointing=False, finetune="full",
                                         transformers_model=True)
    assert isinstance(lean.parts.backend.model, LeanLlamaForCausalLM)
    assert type(hf.parts.backend.model).__name__ == "LlamaForCausalLM"
    trained = _steps_agree(bench, (lean, lean_state), (hf, hf_state), 3,
                           ("loss", "grad_norm", "optimizer/logical_batch_sha256", "mean_reward"))
    assert trained >= 2
    hf_params = dict(hf.parts.backend.model.named_parameters())
    for name, param in lean.parts.backend.model.named_parameters():
        assert torch.equal(param, hf_params[name]), name


def test_mode_switch_sets_every_module_like_train(bench, tmp_path):
    loop, _ = bench.issue_step_loop(tmp_path, legacy=False)
    model = loop.parts.backend.model
    switch = ModeSwitch(model)
    for mode in (False, True, False):
        switch.set(mode)
        assert {m.training for m in model.modules()} == {mode}
    model.train()


def test_mode_switch_falls_back_to_train_for_a_module_that_overrides_it():
    calls = []

    class Custom(torch.nn.Linear):
        def train(self, mode: bool = True):
            calls.append(mode)
            return super().train(mode)

    model = torch.nn.Sequential(torch.nn.Linear(2, 2), Custom(2, 2))
    ModeSwitch(model).set(False)
    assert calls == [False] and not model[0].training and not model[1].training
