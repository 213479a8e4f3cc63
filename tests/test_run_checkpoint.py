"""Atomic checkpoints: verification, fallback to the previous one, keep-last-N, resume resolution."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from retrain_ray.run.checkpoint import (
    CheckpointManager,
    load_state,
    resolve_resume_dir,
    verify_checkpoint,
)
from retrain_ray.run.state import TrainerState, capture_rng_state, restore_rng_state


def _payload(text: str):
    def write(directory: Path) -> None:
        (directory / "adapter.bin").write_text(text)
        (directory / "optimizer.pt").write_text(text * 2)

    return write


def _save(mgr: CheckpointManager, step: int) -> Path:
    state = TrainerState(step=step, example_idx=4 * (step + 1), total_correct=step, total_completions=8 * (step + 1))
    return mgr.save(f"checkpoint_step_{step + 1}", state, _payload(f"weights-{step}"))


def test_save_writes_state_checksums_and_run_level_copies(tmp_path):
    mgr = CheckpointManager(tmp_path, keep_last=3)
    path = _save(mgr, 19)
    assert path.name == "checkpoint_step_20"
    assert verify_checkpoint(path) == ""
    state = load_state(path)
    assert (state.step, state.example_idx, state.checkpoint_name) == (19, 80, "checkpoint_step_20")
    assert state.next_step == 20
    assert json.loads((tmp_path / "trainer_state.json").read_text())["step"] == 19
    assert (tmp_path / "latest_sampler_path.txt").read_text().strip() == str(path)
    assert not list((tmp_path / "checkpoints").glob(".tmp-*"))


def test_keep_last_prunes_oldest_step_checkpoints_but_never_final(tmp_path):
    mgr = CheckpointManager(tmp_path, keep_last=2)
    for step in (4, 9, 14, 19):
        _save(mgr, step)
    mgr.save("final", TrainerState(step=24), _payload("final"))
    names = [p.name for p in mgr.candidates()]
    assert names == ["final", "checkpoint_step_20", "checkpoint_step_15"]


def test_damaged_newest_checkpoint_falls_back_to_previous(tmp_path, caplog):
    mgr = CheckpointManager(tmp_path, keep_last=0)
    _save(mgr, 9)
    newest = _save(mgr, 19)
    (newest / "adapter.bin").write_text("bit rot")
    with caplog.at_level("WARNING"):
        chosen = mgr.latest_valid()
    assert chosen is not None and chosen.name == "checkpoint_step_10"
    assert "does not match its checksum" in caplog.text


def test_partial_checkpoint_without_checksums_is_skipped(tmp_path):
    mgr = CheckpointManager(tmp_path, keep_last=0)
    _save(mgr, 9)
    partial = tmp_path / "checkpoints" / "checkpoint_step_20"
    partial.mkdir()
    (partial / "adapter.bin").write_text("half")
    assert "incomplete" in verify_checkpoint(partial)
    assert resolve_resume_dir(tmp_path).name == "checkpoint_step_10"


def test_resolve_resume_accepts_checkpoint_or_run_dir_and_explains_absence(tmp_path):
    mgr = CheckpointManager(tmp_path / "run", keep_last=0)
    path = _save(mgr, 4)
    assert resolve_resume_dir(path) == path
    assert resolve_resume_dir(tmp_path / "run") == path
    with pytest.raises(FileNotFoundError, match="no complete checkpoint under"):
        resolve_resume_dir(tmp_path / "empty")


def test_rng_state_round_trip_reproduces_draws():
    import random

    import numpy as np
    import torch

    gen = torch.Generator().manual_seed(7)
    saved = capture_rng_state({"engine": gen})
    first = (random.random(), float(np.random.rand()), float(torch.rand(1)), float(torch.rand(1, generator=gen)))
    restore_rng_state(saved, {"engine": gen})
    again = (random.random(), float(np.random.rand()), float(torch.rand(1)), float(torch.rand(1, generator=gen)))
    assert first == again


def test_trainer_state_json_round_trip_ignores_unknown_keys():
    state = TrainerState(step=3, sepa={"var_ema": None, "gate_open": True}, backpressure={"n": 2})
    data = json.loads(state.to_json())
    data["future_field"] = 1
    restored = TrainerState.from_json(json.dumps(data))
    assert restored == state
