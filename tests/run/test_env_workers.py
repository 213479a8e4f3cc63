"""`[environment] rollout_env_workers` / `rollout_buffer_size`: episodes are reset and stepped by a pool of
worker threads, with results in the episodes' order, so a run is the same with 1 worker or 4; a worker's
exception is raised in the run's thread as itself, naming its episode."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import torch
from helpers import TINY_CPU, final_weights, write_config

from retrain_ray.config import load_config
from retrain_ray.logs import read_stream
from retrain_ray.run.multiturn import EnvPool
from retrain_ray.run.train import train_run

ENV = {"provider": "builtin", "id": "digit_chain", "args": {"num_examples": 16, "num_eval": 4}}
TRAINING = {"batch_size": 2, "group_size": 4, "max_tokens": 3, "lr": 3e-3, "save_every": 0, "sft_warmup_steps": 0,
            "seed": 7, "max_steps": 2,
            "tl_grpo": True, "tl_grpo_branch_size": 4, "tl_grpo_lookahead_steps": 1}  # TL-GRPO: every step trains


def _run(tmp_path: Path, name: str, workers: int, buffer: int) -> Path:
    run_dir = tmp_path / name
    write_config(tmp_path / f"{name}.toml", base={k: v for k, v in TINY_CPU.items() if k != "data"},
                 environment={**ENV, "rollout_env_workers": workers, "rollout_buffer_size": buffer},
                 logging={"log_dir": str(run_dir)}, training=TRAINING)
    train_run(load_config(tmp_path / f"{name}.toml"), run_name=name, run_dir=run_dir)
    return run_dir


def test_four_workers_train_exactly_as_one(tmp_path):
    one, four = _run(tmp_path, "one", 1, 0), _run(tmp_path, "four", 4, 1)
    keys = ("step", "mean_reward", "loss", "optimizer/logical_batch_sha256")
    rows_one = [{k: r[k] for k in keys} for r in read_stream(one).to_pylist()]
    assert rows_one == [{k: r[k] for k in keys} for r in read_stream(four).to_pylist()]
    assert len(rows_one) == 2 and rows_one[0]["optimizer/logical_batch_sha256"]
    a, b = final_weights(one), final_weights(four)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("buffer", [0, 2])
def test_the_workers_run_calls_at_once_and_return_them_in_order(buffer):
    together = threading.Barrier(4, timeout=30)  # broken (an error) unless four calls are in flight at once

    def call(i: int) -> int:
        if i < 4:
            together.wait()
        return i * i

    with EnvPool("test", workers=4, buffer=buffer) as pool:
        assert pool.map(call, list(range(10)), str) == [i * i for i in range(10)]


def test_a_worker_exception_is_raised_as_itself_naming_its_episode():
    class Refused(ConnectionError):
        pass

    def call(i: int) -> int:
        if i == 5:
            raise Refused("the environment server hung up")
        return i

    for workers in (1, 3):
        with EnvPool("digit_chain", workers=workers) as pool, pytest.raises(Refused, match="hung up") as info:
            pool.map(call, list(range(8)), lambda i: f"episode {i}")
        if workers > 1:
            assert "environment worker of digit_chain: episode 5" in "".join(info.value.__notes__)


def test_worker_counts_are_checked():
    with pytest.raises(ValueError, match="rollout_env_workers"):
        EnvPool("x", workers=0)
