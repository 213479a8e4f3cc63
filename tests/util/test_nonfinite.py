"""Non-finite rewards, gradients and weights stop a run with a clear error; nothing poisoned is
saved or resumed; a hanging synchronous reward times out (issue 15)."""

from __future__ import annotations

import json
import logging
import math
import textwrap
import time

import pytest
import torch
from helpers import write_config
from safetensors.torch import save_file

from retrain_ray.cli import main as cli_main
from retrain_ray.rewards.custom import CustomReward, RewardFunctionError, RewardTimeoutError
from retrain_ray.run.resume.checkpoint import CheckpointManager, resolve_resume_dir, verify_checkpoint
from retrain_ray.run.state import TrainerState
from retrain_ray.util.finite import NonFiniteError, check_rewards, nonfinite_tensors

REWARDS = {
    "reward_inf": "def score(completion, reference):\n    return float('inf')\n",
    "reward_nan": "def score(completion, reference):\n    return float('nan')\n",
    "reward_nan_later": textwrap.dedent("""
        calls = [0]
        def score(completion, reference):
            calls[0] += 1
            return float('nan') if calls[0] > 8 else 1.0 * (calls[0] % 2)
    """),
}


@pytest.fixture
def reward_modules(tmp_path, monkeypatch):
    for name, body in REWARDS.items():
        (tmp_path / f"{name}.py").write_text(body)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


@pytest.mark.parametrize(("module", "value"), [("reward_inf", "inf"), ("reward_nan", "nan"),
                                               ("reward_nan_later", "nan")])
def test_nonfinite_reward_fails_the_run_clearly_and_saves_nothing_poisoned(reward_modules, capsys, monkeypatch,
                                                                           module, value):
    monkeypatch.setattr(logging.root, "handlers", [])  # basicConfig of an earlier test bound a closed stream
    log_dir = reward_modules / f"run-{module}"
    path = write_config(reward_modules / f"{module}.toml", reward={"type": "custom", "custom_module": module},
                        training={"batch_size": 2, "group_size": 2, "max_tokens": 4, "max_steps": 3, "save_every": 1},
                        logging={"log_dir": str(log_dir)})
    assert cli_main(["train", str(path), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert f"reward {module + ':score'!r} returned {value}" in err
    # a library logger bound to an earlier test's closed capture stream prints "--- Logging error ---"
    # with a traceback of its own; the command itself must print none
    assert err.count("Traceback") == err.count("--- Logging error ---")
    for ckpt in (log_dir / "checkpoints").glob("*"):
        assert verify_checkpoint(ckpt) == "", ckpt  # only the good steps before the bad reward were kept
    assert not (log_dir / "checkpoints" / "final").exists()


def test_check_rewards_names_the_completion():
    check_rewards([0.0, 1.0, -2.5], ["a", "b", "c"], "r")
    with pytest.raises(NonFiniteError, match=r"reward 'r' returned -inf for completion 1 \('bad'\)"):
        check_rewards([0.0, -math.inf], ["ok", "bad"], "r")


def _nan_payload(directory):
    save_file({"w": torch.tensor([1.0, float("nan")])}, str(directory / "model.safetensors"))


def test_checkpoint_with_nonfinite_weights_is_never_written(tmp_path):
    manager = CheckpointManager(tmp_path)
    with pytest.raises(NonFiniteError, match="model.safetensors:w"):
        manager.save("checkpoint_step_1", TrainerState(step=0), _nan_payload)
    assert not (tmp_path / "checkpoints" / "checkpoint_step_1").exists()
    assert not list((tmp_path / "checkpoints").glob(".tmp-*"))


def test_resume_skips_a_checkpoint_with_nonfinite_weights_and_valid_checksums(tmp_path):
    manager = CheckpointManager(tmp_path)
    manager.save("checkpoint_step_1", TrainerState(step=0),
                 lambda d: save_file({"w": torch.ones(2)}, str(d / "model.safetensors")))
    manager.save("checkpoint_step_2", TrainerState(step=1),
                 lambda d: save_file({"w": torch.ones(2)}, str(d / "model.safetensors")))
    poisoned = tmp_path / "checkpoints" / "checkpoint_step_2"
    _nan_payload(poisoned)  # as a save before this guard existed: NaN weights, checksums re-signed
    from retrain_ray.run.resume.checkpoint import CHECKSUMS, _file_checksums

    (poisoned / CHECKSUMS).write_text(json.dumps(_file_checksums(poisoned)))
    assert nonfinite_tensors(poisoned) == ["model.safetensors:w"]
    assert "non-finite weights" in verify_checkpoint(poisoned)
    assert resolve_resume_dir(tmp_path).name == "checkpoint_step_1"


def test_killed_save_leftovers_are_pruned_by_the_next_save(tmp_path):
    manager = CheckpointManager(tmp_path, keep_last=0)
    stale = tmp_path / "checkpoints" / ".tmp-checkpoint_step_4-999999"
    stale.mkdir(parents=True)
    (stale / "model.safetensors").write_bytes(b"half")
    manager.save("checkpoint_step_5", TrainerState(step=4),
                 lambda d: save_file({"w": torch.ones(1)}, str(d / "model.safetensors")))
    assert not stale.exists() and (tmp_path / "checkpoints" / "checkpoint_step_5").is_dir()


def test_hanging_sync_reward_times_out_naming_the_function(tmp_path, monkeypatch):
    # a name of its own: `plugins.slow_reward` (the test plugins' folder) is looked up first, as [plugins] says
    (tmp_path / "hanging_reward.py").write_text("import time\ndef score(c, r):\n    time.sleep(30)\n    return 1.0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    reward = CustomReward("hanging_reward", "score", timeout_s=0.5)
    started = time.perf_counter()
    with pytest.raises(RewardTimeoutError, match=r"hanging_reward:score did not return within 0.5 s"):
        reward.score_batch(["a", "b"], ["x", "x"])
    assert time.perf_counter() - started < 5


def test_sync_reward_errors_reach_the_caller(tmp_path, monkeypatch):
    (tmp_path / "raising_reward.py").write_text("def score(c, r):\n    raise KeyError('no such field')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(RewardFunctionError, match="raising_reward:score raised KeyError: 'no such field'") as info:
        CustomReward("raising_reward").score_batch(["a"], ["x"])
    assert isinstance(info.value.__cause__, KeyError)


def test_backend_refuses_a_nonfinite_gradient_and_keeps_its_weights(tmp_path):
    from retrain_ray.backends.local import PolicySettings, build_shared_policy
    from retrain_ray.backends.types import TrainBatch
    from retrain_ray.models import encode_prompt

    _engine, backend, tok = build_shared_policy("builtin:tiny", PolicySettings(finetune="full"), device="cpu",
                                                cache_dir=tmp_path)
    prompt = encode_prompt(tok, "123")
    row = prompt + [5, 6, 7]
    batch = TrainBatch([row] * 2, [[0.0] * len(row)] * 2, [[0.0] * len(prompt) + [float("inf")] * 3] * 2,
                       [len(prompt)] * 2)
    before = {k: v.clone() for k, v in backend.model.state_dict().items()}
    with pytest.raises(NonFiniteError, match="gradient norm is nan at update 1"):
        backend.train_step(batch, lr=1e-2, weight_decay=0.0)
    after = backend.model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before) and backend.version == 0
