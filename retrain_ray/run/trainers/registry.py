"""What `[training] trainer` runs: the loop of each in-process runner, and which runners run outside it.

* "retrain" (default): the RL loop (run/loop.py), with its SFT warm start.
* "sft": standalone supervised fine-tuning: every one of the run's `max_steps` steps is a warm-start step
  (run/trainers/sft.py): on the demonstrations of `sft_data_path` (pinned and checked as for the warm start),
  or, without a file, on the task's own answers; batches of `sft_batch_size` (0: batch_size x group_size),
  at `sft_lr` (0: lr), rows with phase "sft", checkpoints every `save_every` and at the end, resume as any
  run. `sft_warmup_steps` and `sft_target_correct_rate` do not apply (the whole run is SFT).
* "ttt_discover": test-time training on one problem (run/trainers/discover.py).
* "command" and dotted-path plugin runners train outside this process's loop (run/trainers/external.py).

`train_run` (run/train.py) is the one entry point of the CLI and of campaign trials; it dispatches here.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from retrain_ray.run.loop import RunComponents, RunLoop
from retrain_ray.run.trainers.discover import DiscoverLoop

if TYPE_CHECKING:
    from retrain_ray.config.schema import RetrainConfig


def runner_config(cfg: RetrainConfig) -> RetrainConfig:
    """The config the runner's loop runs: for "sft", every step a warm-start step without a probe."""
    t = cfg.training
    if t.trainer != "sft":
        return cfg
    training = t.model_copy(update={"sft_warmup_steps": t.max_steps, "sft_target_correct_rate": 0.0})
    return cfg.model_copy(update={"training": training})


def build_loop(cfg: RetrainConfig, parts: RunComponents, *, run_name: str, run_dir: Path, condition: str) -> RunLoop:
    """The loop of the run's in-process trainer."""
    if cfg.training.trainer == "ttt_discover":
        return DiscoverLoop(cfg, parts, run_name=run_name, run_dir=run_dir, condition=condition)
    loop = RunLoop(cfg, parts, run_name=run_name, run_dir=run_dir, condition=condition)
    if cfg.training.trainer == "sft" and loop.warm_start.rows is None and parts.format_answer is None:
        raise ValueError('trainer = "sft" has nothing to train on: set [training] sft_data_path to a JSONL file of '
                         f"demonstrations (the data source {cfg.data.source!r} gives no reference answers to "
                         "train on)")
    return loop
