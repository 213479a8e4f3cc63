"""Seed 001's training keys act (issue 27): its names as aliases, num_epochs, checkpoint_dir with automatic
resume, the lr schedule with warmup, micro x accumulation, and the keys that would otherwise be inert."""

from __future__ import annotations

import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from retrain_ray.config import ConfigError, RetrainConfig, load_config
from retrain_ray.config.build import build_config
from retrain_ray.run.epochs import epoch_order, plan_from_config, plan_steps
from retrain_ray.run.loop import LRSchedule, lr_at

ROOT = Path(__file__).resolve().parents[2]
SEED_CONFIGS = sorted((ROOT / "configs" / "seed001").glob("*.toml"))


def _issues(raw: dict) -> str:
    with pytest.raises(ConfigError) as info:
        build_config(raw)
    return str(info.value)


def test_seed_names_are_aliases_of_the_products_keys():
    cfg, _ = build_config({"training": {"num_batches": 7, "save_interval_steps": 3, "eval_interval_steps": 4,
                                        "log_interval_steps": 5, "device": "cuda"}, "data": {"source": "builtin"}})
    t = cfg.training
    assert (t.max_steps, t.save_every, t.eval_every, t.log_every, cfg.backend.devices) == (7, 3, 4, 5, "gpu:0")
    assert build_config({"training": {"device": "cpu"}})[0].backend.devices == "cpu"
    text = _issues({"training": {"num_batches": 7, "max_steps": 3}})
    assert "training.num_batches" in text and "[training] max_steps" in text
    text = _issues({"training": {"device": "cpu"}, "backend": {"devices": "cpu"}})
    assert "training.device" in text and "[backend] devices" in text


def test_lr_schedule_exact_values():
    assert [lr_at(s, base_lr=1.0, total_steps=10, warmup_steps=4) for s in range(5)] == [0.25, 0.5, 0.75, 1.0, 1.0]
    assert [lr_at(s, base_lr=2.0, total_steps=6, warmup_steps=2, kind="linear") for s in range(6)] == \
        [1.0, 2.0, 2.0, 1.5, 1.0, 0.5]
    cosine = [lr_at(s, base_lr=1.0, total_steps=4, kind="cosine") for s in range(4)]
    assert cosine == pytest.approx([1.0, (1 + math.cos(math.pi / 4)) / 2, 0.5, (1 + math.cos(3 * math.pi / 4)) / 2])
    cfg = RetrainConfig.model_validate({"training": {"lr": 1e-3, "max_steps": 20, "warmup_ratio": 0.1}})
    assert LRSchedule.from_training(cfg.training) == LRSchedule(1e-3, 20, 2, "constant")


def test_epochs_reshuffle_per_epoch_with_the_seed_and_cap_the_steps():
    order = epoch_order(list(range(6)), 2, seed=3)
    assert sorted(order[:6]) == sorted(order[6:]) == list(range(6)) and order[:6] != order[6:]
    assert epoch_order(list(range(6)), 2, seed=3) == order and epoch_order(list(range(6)), 2, seed=4) != order
    assert plan_steps(100, 2, 10, 4).steps == 5 and plan_steps(100, 2, 10, 4).limited_by == "num_epochs"
    assert plan_steps(3, 2, 10, 4).limited_by == "max_steps" and plan_steps(3, 0, 10, 4).steps == 3
    cfg = RetrainConfig.model_validate({"data": {"source": "builtin", "num_examples": 10},
                                        "training": {"num_epochs": 2, "batch_size": 4, "max_steps": 100}})
    assert plan_from_config(cfg.training, cfg.data).steps == 5  # what explain and train's progress bar show
    assert plan_from_config(cfg.training, cfg.replace_section("data", source="math").data) is None  # counted when loaded


def test_contradictions_and_inert_keys_are_errors_naming_the_key():
    text = _issues({"training": {"batch_size": 2, "group_size": 4, "micro_batch_size": 2,
                                 "gradient_accumulation_steps": 3}})
    assert "effective batch of 6" in text and "batch_size x group_size = 2 x 4 = 8" in text
    assert "warmup_ratio" in _issues({"training": {"warmup_ratio": 0.1, "warmup_steps": 2}})
    text = _issues({"training": {"eval_every": 5}, "data": {"source": "math"}})
    assert "training.eval_every" in text and "eval split" in text
    for key, value in (("attention_kernel", "flash_attn"), ("kv_cache_dtype", "fp8"), ("prefix_caching", False)):
        text = _issues({"inference": {"engine": "pytorch", key: value}})
        assert f"inference.{key}" in text and "vllm-embedded" in text
    RetrainConfig.model_validate({"inference": {"engine": "vllm-embedded", "kv_cache_dtype": "fp8"}})
    text = _issues({"training": {"checkpoint_dir": "ck"}, "campaign": {"seeds": [1]}})
    assert "training.checkpoint_dir" in text


def test_max_examples_limits_the_builtin_source():
    from retrain_ray.data.loading import load_examples_from_config

    cfg = RetrainConfig.model_validate({"data": {"source": "builtin"}, "training": {"max_examples": 5}})
    assert len(load_examples_from_config(cfg.data, cfg.training).train) == 5


@pytest.mark.parametrize("path", SEED_CONFIGS, ids=[p.stem for p in SEED_CONFIGS])
def test_each_seed_example_trains_the_tiny_model(path, tmp_path, monkeypatch):
    from retrain_ray.logs import read_stream
    from retrain_ray.run.train import train_run

    monkeypatch.chdir(tmp_path)
    cfg = load_config(path, {"training": {"max_steps": 2}})
    train_run(cfg, run_name=path.stem, run_dir=tmp_path / "run")
    rows = read_stream(tmp_path / "run", "metrics").to_pylist()
    assert [r["step"] for r in rows] == [0, 1] and all(r["lr"] > 0 for r in rows)


def _train(config: Path, cwd: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "retrain_ray", "train", str(config), "--quiet", *flags],
                          cwd=cwd, capture_output=True, text=True, timeout=300)


def test_production_pattern_resumes_from_its_checkpoint_dir_and_logs_the_warmup(tmp_path):
    """Seed 001's production pattern (num_batches, save_interval_steps, eval_interval_steps, checkpoint_dir,
    warmup_ratio): a second start with the same checkpoint_dir continues after the first's newest checkpoint."""
    from retrain_ray.logs import read_stream

    config = tmp_path / "production.toml"
    text = (ROOT / "configs" / "seed001" / "production.toml").read_text()
    text = text.replace("num_batches = 10000", "num_batches = 4").replace("save_interval_steps = 100",
                                                                        "save_interval_steps = 2")
    config.write_text(text.replace("eval_interval_steps = 500", "eval_interval_steps = 2").replace(
        "warmup_ratio = 0.1", "warmup_ratio = 0.5"))
    first = _train(config, tmp_path, "--max-steps", "3")
    assert first.returncode == 0, first.stderr
    checkpoints = tmp_path / "checkpoints" / "ckpts"
    assert (checkpoints / "checkpoint_step_2").is_dir() and (checkpoints / "final").is_dir()
    assert not (tmp_path / "logs" / "seed001-production" / "checkpoints").exists()
    second = _train(config, tmp_path)  # num_batches = 4: one more step
    assert second.returncode == 0, second.stderr
    assert "resuming from" in second.stdout and str(Path("checkpoints/ckpts/final")) in second.stdout
    rows = read_stream(tmp_path / "logs" / "seed001-production", "metrics").to_pylist()
    assert [r["step"] for r in rows] == [0, 1, 2, 3]
    # lr 4e-5 (the default). Run 1 plans 3 steps: warmup round(0.5 x 3) = 2 steps (2e-5, 4e-5), then cosine
    # from 4e-5; run 2 plans 4 steps (warmup 2): step 3 is half way down the cosine, 2e-5.
    assert [r["lr"] for r in rows] == pytest.approx([2e-5, 4e-5, 4e-5, 2e-5])


def test_another_configs_checkpoints_are_refused(tmp_path, monkeypatch):
    from retrain_ray.run.resume.point import ForeignRunDir
    from retrain_ray.run.train import train_run

    monkeypatch.chdir(tmp_path)
    path = ROOT / "configs" / "seed001" / "production.toml"
    cfg = load_config(path, {"training": {"max_steps": 2, "save_every": 1}})
    train_run(cfg, run_name="prod", run_dir=tmp_path / "run")
    other = cfg.replace_section("training", lr=1e-2)
    with pytest.raises(ForeignRunDir, match=r"differs in training\.lr"):
        train_run(other, run_name="prod", run_dir=tmp_path / "run2")
    shutil.rmtree(tmp_path / "checkpoints")
