"""Multi-turn runs (`[environment]`, issue 28): the built-in `digit_chain` environment trains on the tiny
model on CPU with TL-GRPO (its EMA baseline logged and checkpointed, a resume exact) and with MT-GRPO."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from helpers import TINY_CPU, environment_run, final_weights, stream_rows, write_config

from retrain_ray.config import ConfigError, load_config
from retrain_ray.data.types import Example
from retrain_ray.environments import load_environment
from retrain_ray.environments.digit_chain import DigitChain, parse_digit
from retrain_ray.logs import read_stream
from retrain_ray.run.train import train_run

ENV = {"provider": "builtin", "id": "digit_chain", "args": {"num_examples": 16, "num_eval": 4}}
TRAINING = {"batch_size": 2, "group_size": 4, "max_tokens": 3, "lr": 3e-3, "save_every": 2, "sft_warmup_steps": 0,
            "seed": 7}
TL_GRPO = {"tl_grpo": True, "tl_grpo_branch_size": 4, "tl_grpo_lookahead_steps": 1, "tl_grpo_ema_decay": 0.8}


def _run(tmp_path: Path, name: str, max_steps: int, *, training=None, environment=None):
    return environment_run(tmp_path, name, max_steps, environment=environment or ENV,
                           training={**TRAINING, **(training or {})})


def _rows(run_dir: Path) -> list[dict]:
    return stream_rows(run_dir)


def test_digit_chain_scores_each_turn_and_the_second_builds_on_the_first():
    env = DigitChain({})
    ep = env.reset(Example("472", "4"))
    first = ep.step("\\boxed{4}")
    assert (first.action, first.reward, first.done, first.observation) == ("4", 1.0, False, "472\\boxed{4}|4>")
    second = ep.step("5")
    assert (second.action, second.reward, second.done) == ("5", 1.0, True)
    assert ep.reward() == 1.0
    wrong = env.reset(Example("472", "4"))
    wrong.step("7")
    assert wrong.step("5").reward == 0.0  # after answering 7 the right second answer is 8
    assert env.replay(Example("472", "4"), ["7", "8"]) == 1.0
    assert parse_digit("x") == "?" and env.parse_action("\\boxed{9}") == "9"
    train, held_out = env.examples()
    assert len(train) == 256 and len(held_out) == 32


def test_tl_grpo_run_trains_checkpoints_its_baseline_and_resumes_exactly(tmp_path):
    cfg, full_dir = _run(tmp_path, "full", 4, training=TL_GRPO)
    train_run(cfg, run_name="r", run_dir=full_dir)
    rows = _rows(full_dir)
    assert len(rows) == 4 and all(r["trained"] for r in rows)  # TL-GRPO keeps tied groups: branches differ
    emas = [r["extras"]["tl_grpo_ema"] for r in rows]
    assert len(set(emas)) > 1 and all(0.0 <= e <= 1.0 for e in emas)
    # every turn is a datum: 2 examples x 4 episodes x 2 turns
    assert all(r["num_datums"] == 16 for r in rows)
    saved = json.loads((full_dir / "checkpoints" / "checkpoint_step_2" / "trainer_state.json").read_text())
    assert saved["tl_grpo_ema"] == emas[1]

    cut_cfg, cut_dir = _run(tmp_path, "cut", 3, training=TL_GRPO)
    train_run(cut_cfg, run_name="r", run_dir=cut_dir)
    shutil.rmtree(cut_dir / "checkpoints" / "final")  # as if it crashed after step 2
    resume_cfg, _ = _run(tmp_path, "cut", 4, training=TL_GRPO)
    train_run(resume_cfg, run_name="r", run_dir=cut_dir, resume_from=cut_dir)
    assert [r["extras"]["tl_grpo_ema"] for r in _rows(cut_dir)] == emas
    whole, again = final_weights(full_dir), final_weights(cut_dir)
    for name in whole:
        torch.testing.assert_close(again[name], whole[name], rtol=0, atol=0)


def test_tl_grpo_llm_branches_sample_alternatives_and_train(tmp_path):
    cfg, run_dir = _run(tmp_path, "llm", 1, training={**TL_GRPO, "tl_grpo_branch_mode": "llm"})
    train_run(cfg, run_name="r", run_dir=run_dir)
    (row,) = _rows(run_dir)
    assert row["trained"] and row["num_datums"] == 16 and row["extras"]["tl_grpo_ema"] != 0.5


def test_mt_grpo_run_trains_on_the_environments_turn_advantages(tmp_path):
    env = {**ENV, "args": {**ENV["args"], "turn_advantages": True}}
    cfg, run_dir = _run(tmp_path, "mt", 2, environment=env,
                        training={"group_size": 8, "eval_every": 2, "eval_examples": 3})
    train_run(cfg, run_name="r", run_dir=run_dir)
    rows = _rows(run_dir)
    assert len(rows) == 2 and all("tl_grpo_ema" not in r["extras"] for r in rows)
    (evaluated,) = read_stream(run_dir, "eval").to_pylist()  # greedy episodes on the environment's eval split
    assert evaluated["step"] == 1 and evaluated["num_examples"] == 3


def test_echo_run_trains_the_observation_tokens_in_the_same_step(tmp_path):
    echo = {"enabled": True, "weight": 0.5, "target_retention": "all", "entropy_floor": 0.0}
    path = tmp_path / "echo.toml"
    write_config(path, base={k: v for k, v in TINY_CPU.items() if k != "data"}, environment=ENV, echo=echo,
                 logging={"log_dir": str(tmp_path / "echo")}, training={**TRAINING, "max_steps": 2})
    train_run(load_config(path), run_name="r", run_dir=tmp_path / "echo")
    rows = _rows(tmp_path / "echo")
    assert len(rows) == 2 and all(r["trained"] for r in rows)  # tied groups train too: they carry targets
    for row in rows:
        extras = row["extras"]
        # the observation of each second turn ("|d>" after the verbatim completion) is a target
        assert extras["echo/target_tokens"] >= 3 * 8 and extras["echo/kept_tokens"] == extras["echo/target_tokens"]
        assert extras["echo/loss"] > 0


def test_echo_keys_are_checked(tmp_path):
    with pytest.raises(ConfigError) as info:
        write_config(tmp_path / "e.toml", echo={"enabled": True})
        load_config(tmp_path / "e.toml")
    assert info.value.locations == ["echo.enabled"]
    with pytest.raises(ConfigError) as info:
        write_config(tmp_path / "w.toml", environment=ENV, echo={"enabled": True, "weight": 0.0})
        load_config(tmp_path / "w.toml")
    assert info.value.locations == ["echo.weight"]
    with pytest.raises(ConfigError) as info:
        write_config(tmp_path / "f.toml", environment=ENV, echo={"target_retention": "all"})
        load_config(tmp_path / "f.toml")
    assert info.value.locations == ["echo.entropy_floor"]
    with pytest.raises(ConfigError) as info:
        write_config(tmp_path / "l.toml", environment=ENV, echo={"loss_fn": "kl"})
        load_config(tmp_path / "l.toml")
    assert info.value.locations == ["echo.loss_fn"]


def test_environment_keys_are_checked(tmp_path):
    with pytest.raises(ConfigError) as info:
        _run(tmp_path, "bad", 1, environment={"provider": "builtin", "id": "nope"})
    assert info.value.locations == ["environment.id"]
    with pytest.raises(ConfigError) as info:
        write_config(tmp_path / "t.toml", training={"tl_grpo": True})
        load_config(tmp_path / "t.toml")
    assert info.value.locations == ["training.tl_grpo"]
    with pytest.raises(ConfigError) as info:
        _run(tmp_path, "decay", 1, training={**TL_GRPO, "tl_grpo_ema_decay": 1.0})
    assert "training.tl_grpo_ema_decay" in info.value.locations
    cfg, _ = _run(tmp_path, "args", 1, environment={**ENV, "args": {"digits": 9}})
    with pytest.raises(ValueError, match="environment.args.digits"):
        load_environment(cfg.environment)
