"""Atomic checkpoints: verification, fallback to the previous one, keep-last-N, resume resolution."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from retrain_ray.run.resume.checkpoint import (
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


def test_a_resume_from_an_earlier_checkpoint_drops_the_abandoned_later_ones(tmp_path):
    """A campaign restores from the checkpoint Tune's synced state names, which may be older than the run's
    newest: the next save must survive keep-last-N (it was pruned at once when steps 15 and 20 stayed)."""
    mgr = CheckpointManager(tmp_path, keep_last=2)
    for step in (4, 9, 14, 19):
        _save(mgr, step)
    mgr.save("final", TrainerState(step=24), _payload("final"))
    resumed = CheckpointManager(tmp_path, keep_last=2)  # the run continues after checkpoint_step_10
    written = _save(resumed, 11)
    assert written.is_dir() and verify_checkpoint(written) == ""
    assert [p.name for p in resumed.candidates()] == ["checkpoint_step_12"]
    assert resumed.latest_valid() == written
    _save(resumed, 13)
    assert [p.name for p in resumed.candidates()] == ["checkpoint_step_14", "checkpoint_step_12"]


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


def test_a_save_that_cannot_write_is_an_oserror_naming_the_checkpoint_and_leaves_nothing(tmp_path):
    """safetensors reports a full disk as its own exception type ('... (os error 28)'): the save
    raises an OSError with errno 28 naming the checkpoint, removes its temporary directory and keeps
    the checkpoints before it."""
    from safetensors import SafetensorError

    mgr = CheckpointManager(tmp_path, keep_last=3)
    good = _save(mgr, 1)

    def full_disk(directory: Path) -> None:
        (directory / "model.safetensors").write_bytes(b"half")
        raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")

    with pytest.raises(OSError) as info:
        mgr.save("checkpoint_step_4", TrainerState(step=3), full_disk)
    assert info.value.errno == 28 and "checkpoint_step_4" in str(info.value) and "resume" in str(info.value)
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["checkpoint_step_2"]
    assert mgr.latest_valid() == good and verify_checkpoint(good) == ""

    def broken(directory: Path) -> None:
        raise ValueError("not an I/O error")

    with pytest.raises(ValueError, match="not an I/O error") as passed:  # other errors pass through unchanged
        mgr.save("checkpoint_step_4", TrainerState(step=3), broken)
    # ... and are not their own cause (a split run's dead trainer raised through here; Ray Tune walks
    # __cause__ and recursed on the cycle until RecursionError)
    assert passed.value.__cause__ is not passed.value
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["checkpoint_step_2"]


def test_endpoint_counters_report_cumulative_retries_and_each_steps_errors():
    from retrain_ray.engines.openai.engine import OpenAIEngine
    from retrain_ray.run.rollout import EndpointCounters

    engine = OpenAIEngine("http://127.0.0.1:9", model_name="builtin:tiny")
    counters = EndpointCounters()
    assert counters.read(engine) == {"openai_retries": 0.0, "endpoint_errors": 0.0}
    engine.counters.retries = 3
    assert counters.read(engine) == {"openai_retries": 3.0, "endpoint_errors": 3.0}
    engine.counters.retries = 4
    assert counters.read(engine) == {"openai_retries": 4.0, "endpoint_errors": 1.0}
    assert counters.read(engine)["endpoint_errors"] == 0.0
    assert counters.read(object()) == {}  # an engine without counters (in-process, split proxies)
