"""The prime_rl backend against its local stand-in (PRIME-RL needs CUDA; the stand-in speaks the same
files, sockets and HTTP calls and really trains the tiny model): 3-step runs over both transports,
the wire schema, strict advantages, weight sync by broadcast + /update_weights, option checks."""

from __future__ import annotations

import json

import msgpack
import pytest
import torch
from helpers import GRPO, TINY_RUN, free_port, write_config

from retrain_ray.backends.prime_rl import build_prime_rl_policy
from retrain_ray.backends.prime_rl.backend import PrimeRLBackend, rl_samples
from retrain_ray.backends.prime_rl.wire import (
    FileSystemSender,
    TrainingBatch,
    TrainingSample,
    broadcast_dir,
    encode_batch,
    rollout_file,
)
from retrain_ray.backends.types import TrainBatch
from retrain_ray.checks.preflight import PreflightError, check_run
from retrain_ray.config import ConfigError, load_config
from retrain_ray.logs import read_stream
from retrain_ray.run.train import train_run


def _config(tmp_path, *, transport: str = "filesystem", sft: int = 0, **options):
    opts = {"standin": True, "transport": transport, "sync_wait_s": 120.0, "sync_poll_s": 0.05, **options}
    if transport == "zmq":
        opts["zmq_port"] = free_port()
    path = write_config(
        tmp_path / "prime.toml", base=TINY_RUN,
        backend={"backend": "prime_rl", "adapter_path": str(tmp_path / "prime"), "options": opts}, algorithm=GRPO,
        training={"max_steps": 3, "sft_warmup_steps": sft, "save_every": 0, "seed": 3},
        logging={"log_dir": str(tmp_path / "logs" / "run")})
    return load_config(path)


def _weights(model):
    return {n: p.detach().clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize(("transport", "sft"), [("filesystem", 0), ("zmq", 1)])
def test_a_run_trains_three_steps_through_the_stand_in(tmp_path, transport, sft):
    cfg = _config(tmp_path, transport=transport, sft=sft)
    check_run(cfg)
    policy = build_prime_rl_policy(cfg)
    standin = policy.engine.standin
    before = _weights(standin.trainer_model)
    try:
        outcome = train_run(cfg, run_name="run", run_dir=tmp_path / "logs" / "run", policy=policy)
    finally:
        policy.engine.close()
        policy.backend.close()
    assert outcome.status == "completed"
    assert standin.error is None and standin.trained_steps == [0, 1, 2]
    run_dir = tmp_path / "prime"
    if transport == "filesystem":
        assert all(rollout_file(run_dir, s).is_file() for s in range(3))
    else:
        assert standin.receiver.senders == {b"prime"}  # sender id: the run directory's name
        assert not (run_dir / "rollouts").exists()
    assert all((broadcast_dir(run_dir, v) / "STABLE").is_file() for v in (1, 2, 3))
    after = _weights(standin.trainer_model)
    assert any(not torch.equal(before[n], after[n]) for n in before)  # the stand-in really trained
    served = dict(standin.inference.base.named_parameters())
    synced = broadcast_dir(run_dir, 2)  # the last version the run synced (before its third step)
    from safetensors.torch import load_file
    for name, tensor in load_file(str(synced / "model.safetensors")).items():
        assert torch.equal(served[name].detach(), tensor)
    assert policy.engine.weights_version == 2
    rows = read_stream(tmp_path / "logs" / "run", "metrics").to_pylist()
    assert [r["step"] for r in rows] == [0, 1, 2]
    assert all(r["loss"] == 0.0 and r["loss_is_placeholder"] and not r["backend_reports_sync_loss"] for r in rows)
    # the run's state says what a resume restores: the counters, not PRIME-RL's weights and optimizer
    state = json.loads((tmp_path / "logs" / "run" / "trainer_state.json").read_text())
    assert state["resume_mode"] == "adapter_only"


def test_the_batch_is_prime_rls_array_layout(tmp_path):
    batch = TrainBatch(tokens_D=[[5, 6, 7, 8]], logprobs_D=[[0.0, 0.0, -0.5, -0.25]],
                       advantages_D=[[0.0, 0.0, 1.5, 1.5]], prompt_lens_D=[2], temperature=0.7)
    backend = PrimeRLBackend(FileSystemSender(tmp_path), tmp_path, env_name="math")
    backend.train_step(batch, lr=1e-3, weight_decay=0.0)
    raw = msgpack.unpackb(rollout_file(tmp_path, 0).read_bytes())
    # TrainingBatch = [examples, step, run_idx]; TrainingSample's fields in declaration order, unset
    # optionals as nil, as msgspec writes array_like structs
    assert raw == [[[[5, 6, 7, 8], [False, False, True, True], [0.0, 0.0, -0.5, -0.25], [0.7] * 4, "math",
                     None, None, None, None, None, None, None, [0.0, 0.0, 1.5, 1.5]]], 0, None]
    assert backend.version == 1 and backend.export_weights().version == 1


def test_token_varying_advantages_are_refused_naming_the_sample():
    batch = TrainBatch(tokens_D=[[1, 2, 3], [1, 2, 3]], logprobs_D=[[0.0] * 3] * 2,
                       advantages_D=[[0.0, 1.0, 1.0], [0.0, 1.0, 0.5]], prompt_lens_D=[1, 1])
    with pytest.raises(ValueError, match=r"sample 1 has token-varying advantages.*transform_mode"):
        rl_samples(batch, "retrain")


def test_token_varying_transforms_fail_preflight(tmp_path):
    cfg = _config(tmp_path)
    cfg = cfg.replace_section("algorithm", advantage_mode="maxrl", transform_mode="gtpo")
    with pytest.raises((PreflightError, ConfigError)):
        check_run(cfg)


@pytest.mark.parametrize(("options", "needle"), [
    ({"strict_advantages": False}, "strict_advantages = false is refused"),
    ({"transport": "nccl"}, "not a PRIME-RL transport"),
    ({"sync_wait": 3.0}, "did you mean .sync_wait_s."),
    ({"sync_poll_s": 0}, "every wait has a timeout"),
])
def test_bad_options_are_named_with_the_fix(tmp_path, options, needle):
    path = write_config(tmp_path / "bad.toml", base=TINY_RUN,
                        backend={"backend": "prime_rl", "options": options})
    with pytest.raises(ConfigError, match=needle):
        load_config(path)


def test_weight_sync_waits_for_the_broadcast_and_times_out_naming_it(tmp_path):
    from retrain_ray.backends.prime_rl.backend import wait_for_broadcast

    with pytest.raises(TimeoutError, match=r"step_4/STABLE.*sync_wait_s"):
        wait_for_broadcast(tmp_path, 4, wait_s=0.2, poll_s=0.05)
    (broadcast_dir(tmp_path, 4)).mkdir(parents=True)
    (broadcast_dir(tmp_path, 4) / "STABLE").touch()
    assert wait_for_broadcast(tmp_path, 4, wait_s=0.2, poll_s=0.05) == broadcast_dir(tmp_path, 4)


def test_encode_is_decodable_by_the_schema():
    from retrain_ray.backends.prime_rl.wire import decode_batch

    sample = TrainingSample(token_ids=[1, 2], mask=[False, True], logprobs=[0.0, -1.0], temperatures=[1.0, 1.0],
                            env_name="e", rl_weights=[0.0, 0.0], ce_weights=[0.0, 1.0])
    assert decode_batch(encode_batch(TrainingBatch(examples=[sample], step=7))) == TrainingBatch([sample], 7)
