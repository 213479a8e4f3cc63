"""A delight run with an adaptive eta carries its EMA across steps and across a resume (issue 28)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from helpers import TINY_RUN, final_weights, write_config

from retrain_ray.config import load_config
from retrain_ray.logs import read_stream
from retrain_ray.run.train import train_run

ADAPTIVE = {
    "advantage_mode": "maxrl",
    "transform_mode": "delight_sepa",
    "transform_params": {"delight_eta_mode": "adaptive", "delight_eta_ema_decay": 0.8, "delight_lambda": 1.0},
}


def _run(tmp_path: Path, name: str, max_steps: int):
    run_dir = tmp_path / name
    write_config(tmp_path / f"{name}.toml", base=TINY_RUN, algorithm=ADAPTIVE, logging={"log_dir": str(run_dir)},
                 training={"max_steps": max_steps, "sft_warmup_steps": 0, "save_every": 2})
    return load_config(tmp_path / f"{name}.toml"), run_dir


def _extras(run_dir: Path) -> list[dict[str, float]]:
    """Each step's extra metrics (the `dg_*` ones live in the log's `extras` map)."""
    return [dict(row["extras"]) for row in read_stream(run_dir).to_pylist()]


def test_adaptive_eta_ema_is_checkpointed_and_a_resume_is_exact(tmp_path):
    cfg, full_dir = _run(tmp_path, "full", 4)
    train_run(cfg, run_name="r", run_dir=full_dir)
    rows = _extras(full_dir)
    assert len(rows) == 4
    assert "dg_eta_prev" not in rows[0]  # nothing to smooth towards yet
    for before, row in zip(rows, rows[1:], strict=False):
        assert row["dg_eta_prev"] == before["dg_eta"]  # each step smooths towards the last step's eta
    saved = json.loads((full_dir / "checkpoints" / "checkpoint_step_2" / "trainer_state.json").read_text())
    assert saved["delight_eta_ema"] == rows[1]["dg_eta"]

    cut_cfg, cut_dir = _run(tmp_path, "cut", 3)
    train_run(cut_cfg, run_name="r", run_dir=cut_dir)
    shutil.rmtree(cut_dir / "checkpoints" / "final")  # as if it crashed after step 2: resume at step 2
    resume_cfg, _ = _run(tmp_path, "cut", 4)
    train_run(resume_cfg, run_name="r", run_dir=cut_dir, resume_from=cut_dir)
    resumed = _extras(cut_dir)
    assert [r["dg_eta"] for r in resumed] == [r["dg_eta"] for r in rows]
    whole, again = final_weights(full_dir), final_weights(cut_dir)
    for name in whole:
        torch.testing.assert_close(again[name], whole[name], rtol=0, atol=0)
