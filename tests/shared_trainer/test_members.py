"""Members of the shared trainer: checkpoints move between the shared trainer and the solo path and continue
exactly; runs never touch each other's adapters; runs that cannot share are refused with the reason."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from batches import credited_batch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_equivalence import TOLERANCE, VOCAB, _member, _request, adapter_difference, optimizer_difference

from retrain_ray.backends.local import LoraSettings, PolicySettings
from retrain_ray.shared_trainer import SharedTrainer, SharedTrainerError, StepRequest


def _steps(trainer, backend, name: str, steps: range) -> None:
    for step in steps:
        request = _request(name, {"transform_mode": "gtpo"}, step, 0)
        trainer.train_step({name: request})
        backend.train_step(request.batch, lr=request.lr, weight_decay=request.weight_decay)


def test_checkpoint_from_the_shared_trainer_resumes_alone_and_back(solo, shared, tmp_path):
    settings, _ = _member(1, "grpo", "gtpo")
    trainer, alone = shared(), solo(settings)
    trainer.add_run("r", settings)
    _steps(trainer, alone, "r", range(3))
    (tmp_path / "shared").mkdir()
    (tmp_path / "solo").mkdir()
    trainer.save_checkpoint("r", tmp_path / "shared")
    alone.save_checkpoint(tmp_path / "solo")
    # the same files as the solo backend writes: adapter config text, tensor names and shapes, optimizer layout
    for name in ("adapter/adapter_config.json",):
        assert (tmp_path / "shared" / name).read_text() == (tmp_path / "solo" / name).read_text()
    from safetensors.torch import load_file

    mine, theirs = (load_file(str(tmp_path / d / "adapter/adapter_model.safetensors")) for d in ("shared", "solo"))
    assert {k: v.shape for k, v in mine.items()} == {k: v.shape for k, v in theirs.items()}
    saved = [torch.load(tmp_path / d / "optimizer.pt", weights_only=True) for d in ("shared", "solo")]
    assert saved[0]["version"] == saved[1]["version"] == 3
    assert saved[0]["optimizer"]["param_groups"] == saved[1]["optimizer"]["param_groups"]
    # shared -> alone: a fresh solo backend loads the shared trainer's checkpoint and continues as the shared run
    resumed_alone = solo(settings)
    resumed_alone.load_checkpoint(tmp_path / "shared")
    assert adapter_difference(resumed_alone, trainer, "r") == 0.0
    assert optimizer_difference(resumed_alone, trainer, "r") == 0.0
    # alone -> shared: a new member loads the solo checkpoint and continues as the solo run
    back = shared()
    back.add_run("r", dataclasses.replace(settings, seed=999))  # another init, overwritten by the checkpoint
    back.load_checkpoint("r", tmp_path / "solo")
    assert back.version("r") == 3 and adapter_difference(alone, back, "r") == 0.0
    _steps(back, alone, "r", range(3, 6))
    _steps(trainer, resumed_alone, "r", range(3, 6))
    assert adapter_difference(alone, back, "r") < TOLERANCE
    assert adapter_difference(resumed_alone, trainer, "r") < TOLERANCE


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(st.sets(st.sampled_from("abc"), min_size=1), min_size=1, max_size=4))
def test_a_step_changes_only_the_runs_it_names(shared, steps):
    """Whatever subset of members steps, the others' adapters and optimizer states stay bit for bit."""
    trainer = shared()
    for i, name in enumerate("abc"):
        trainer.add_run(name, _member(i, "grpo", "none")[0])
    for k, names in enumerate(steps):
        before = {n: (trainer.adapter_tensors(n), trainer.version(n)) for n in "abc"}
        requests = {n: StepRequest(credited_batch(10 * k + ord(n), vocab=VOCAB), lr=1e-2) for n in sorted(names)}
        trainer.train_step(requests)
        for n in "abc":
            tensors, version = before[n]
            after = trainer.adapter_tensors(n)
            unchanged = all(torch.equal(after[key], value) for key, value in tensors.items())
            assert unchanged == (n not in names)
            assert trainer.version(n) == version + (n in names)


def test_a_run_trains_the_same_with_or_without_company(shared):
    """Run a's update does not depend on who else is in the batch (the others' rows, ranks and sizes)."""
    results = []
    for company in ((), ("b",), ("b", "c")):
        trainer = shared()
        for i, name in enumerate(("a", *company)):
            trainer.add_run(name, _member(i, "grpo", "gtpo")[0])
        for step in range(3):
            trainer.train_step({n: _request(n, {"transform_mode": "gtpo"}, step, i) for i, n in enumerate(("a", *company))})
        results.append(trainer.adapter_tensors("a"))
    for other in results[1:]:
        assert max(float((other[k] - results[0][k]).abs().max()) for k in other) < 1e-6


def test_runs_that_cannot_share_are_refused_with_the_reason(shared):
    trainer: SharedTrainer = shared()
    trainer.add_run("ok", PolicySettings(lora=LoraSettings(rank=4)))
    cases = {
        "full": (PolicySettings(finetune="full"), "only LoRA runs"),
        "dropout": (PolicySettings(lora=LoraSettings(rank=4, dropout=0.1)), "dropout"),
        "targets": (PolicySettings(lora=LoraSettings(rank=4, target_modules=("q_proj",))), "LoRA targets differ"),
        "none": (PolicySettings(lora=LoraSettings(rank=4, target_modules=("nope",))), "match no Linear"),
        "dtype": (PolicySettings(lora=LoraSettings(rank=4), dtype="bfloat16"), "dtype"),
        "ok": (PolicySettings(lora=LoraSettings(rank=4)), "already a member"),
    }
    for run_id, (settings_, reason) in cases.items():
        with pytest.raises(SharedTrainerError, match=reason):
            trainer.add_run(run_id, settings_)
    with pytest.raises(SharedTrainerError, match="not a member"):
        trainer.train_step({"ghost": StepRequest(credited_batch(0, vocab=VOCAB), lr=1e-3)})
    assert trainer.members == ["ok"]


def test_different_ranks_pad_exactly(solo, shared):
    """Ranks 2 and 16 in one batch (the rank-2 adapter zero-padded to 16) each train as alone."""
    trainer = shared()
    members = {f"r{rank}": PolicySettings(lora=LoraSettings(rank=rank), seed=rank) for rank in (2, 16)}
    backends = {}
    for name, s in members.items():
        trainer.add_run(name, s)
        backends[name] = solo(s)
    for step in range(3):
        requests = {n: _request(n, {}, step, i) for i, n in enumerate(members)}
        trainer.train_step(requests)
        for n, r in requests.items():
            backends[n].train_step(r.batch, lr=r.lr, weight_decay=r.weight_decay)
    assert trainer.export_weights("r2").tensors["base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight"].shape[0] == 2
    assert max(adapter_difference(backends[n], trainer, n) for n in members) < TOLERANCE
    assert json.dumps(sorted(trainer.members)) == '["r16", "r2"]'


def test_serving_scores_each_row_under_its_own_runs_adapter(solo, shared):
    """The one copy scores rows of two runs at once as each run's own model does (what sampling needs)."""
    from retrain_ray.backends.local.scoring import microbatches, next_token_logits

    trainer, backends = shared(), {}
    for i, name in enumerate(("a", "b")):
        settings, _ = _member(i, "grpo", "gtpo")
        trainer.add_run(name, settings)
        backends[name] = solo(settings)
        _steps(trainer, backends[name], name, range(2))  # trained adapters: B no longer zero
    batch = credited_batch(7, vocab=VOCAB)
    mb = next(microbatches(batch, 0, torch.device("cpu")))
    rows = torch.arange(mb.input_ids_B_T.shape[0]) % 2  # even rows under a, odd under b
    with trainer.serving(["a", "b"], rows) as model, torch.no_grad():
        shared_logits = next_token_logits(model, mb)
    for index, name in enumerate(("a", "b")):
        backends[name].model.eval()
        with torch.no_grad():
            alone = next_token_logits(backends[name].model, mb)
        mine = shared_logits[rows == index]
        assert torch.allclose(mine, alone[rows == index], atol=1e-5)
    with torch.no_grad():
        bare = next_token_logits(trainer.model, mb)  # outside `serving`: the base model, no adapter
    assert not torch.allclose(bare, shared_logits, atol=1e-4)


def test_a_non_finite_member_fails_alone(shared):
    """A member whose gradient is not finite gets its error back, weights unchanged; the others update."""
    trainer = shared()
    for i, name in enumerate(("ok", "bad")):
        trainer.add_run(name, _member(i, "grpo", "none")[0])
    good = credited_batch(1, vocab=VOCAB)
    broken = dataclasses.replace(good, advantages_D=[[float("nan") if a else 0.0 for a in row] for row in good.advantages_D])
    before = trainer.adapter_tensors("bad")
    out = trainer.train_step({"ok": StepRequest(good, lr=1e-2), "bad": StepRequest(broken, lr=1e-2)})
    assert set(out.errors) == {"bad"} and "gradient norm is nan" in str(out.errors["bad"])
    assert set(out.results) == {"ok"} and trainer.version("ok") == 1 and trainer.version("bad") == 0
    assert all(torch.equal(trainer.adapter_tensors("bad")[k], v) for k, v in before.items())
