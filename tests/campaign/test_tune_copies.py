"""Tune's checkpoint copies bounded by keep_last_checkpoints: never one the synced experiment state names.

The experiment states here are written with Tune's own classes (the run metadata and checkpoint
manager a real `Tuner` pickles), the copies are real directories on pyarrow's local filesystem.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.fs as pafs
from hypothesis import given
from hypothesis import strategies as st
from ray.train import CheckpointConfig
from ray.train._internal.checkpoint_manager import _CheckpointManager, _TrainingResult
from ray.tune import Checkpoint
from ray.tune.trainable.metadata import _TrainingRunMetadata

from retrain_ray.campaign.resume.tune_copies import copy_indices, prunable, prune_trial, synced_latest


@given(st.sets(st.integers(0, 40), max_size=30), st.integers(0, 40), st.integers(0, 6))
def test_prunable_spares_the_named_copy_and_the_newest_keep(indices, named, keep):
    indices = sorted(indices)
    doomed = prunable(indices, named, keep)
    kept = [i for i in indices if i not in doomed]
    assert set(doomed) <= set(indices)
    assert all(i < named for i in doomed), "a copy the synced state names (or a newer one) is never deleted"
    if keep <= 0:
        assert doomed == []
    else:
        assert indices[-keep:] == kept[-keep:], "the newest `keep` copies stay"
        if named in indices:
            assert len(kept) == len([i for i in indices if i >= min(named, indices[-keep:][0])])


def test_prunable_hand_cases():
    assert prunable(list(range(10)), 3, 2) == [0, 1, 2]  # the synced state still names 3: 3..7 wait
    assert prunable(list(range(10)), 9, 2) == list(range(8))
    assert prunable(list(range(10)), None, 2) == []  # no synced state names the run yet
    assert prunable(list(range(10)), 9, 0) == []  # keep_last_checkpoints = 0: keep all
    assert prunable([4, 5], 5, 2) == []


def _state(path: Path, latest: dict[str, int]) -> None:
    """An experiment state as Tune writes it: per trial, run metadata naming its latest checkpoint."""
    trial_data = []
    for trial_dir, index in latest.items():
        metadata = _TrainingRunMetadata()
        metadata.checkpoint_manager = _CheckpointManager(CheckpointConfig(num_to_keep=None))
        for i in range(index + 1):
            checkpoint = Checkpoint(f"{trial_dir}/checkpoint_{i:06d}")
            metadata.checkpoint_manager.register_checkpoint(_TrainingResult(checkpoint, {"step": i}))
        trial_data.append(["{}", metadata.get_json_state()])
    path.write_text(json.dumps({"trial_data": trial_data, "runner_data": {}, "stats": {}}))


def _copies(trial_dir: Path, n: int) -> None:
    for i in range(n):
        (trial_dir / f"checkpoint_{i:06d}").mkdir(parents=True)
        (trial_dir / f"checkpoint_{i:06d}" / "state.json").write_text("{}")


def test_copies_older_than_the_synced_state_are_deleted_newer_ones_wait(tmp_path):
    fs = pafs.LocalFileSystem()
    run_a, run_b = tmp_path / "tune" / "a", tmp_path / "tune" / "b"
    _copies(run_a, 10)
    _copies(run_b, 4)
    (run_a / "result.json").write_text("")
    _state(tmp_path / "tune" / "experiment_state-2026-01-01_00-00-00.json", {str(run_a): 3})
    named = synced_latest(fs, str(tmp_path / "tune"))
    assert named == {str(run_a): 3}
    assert prune_trial(fs, str(run_a), named.get(str(run_a)), keep=2) == [0, 1, 2]
    assert prune_trial(fs, str(run_b), named.get(str(run_b)), keep=2) == []  # not in the synced state yet
    assert copy_indices(fs, str(run_a)) == list(range(3, 10)) and (run_a / "result.json").is_file()
    # a later session's state (restore reads the newest file) names the newest copies
    _state(tmp_path / "tune" / "experiment_state-2026-01-02_00-00-00.json", {str(run_a): 9, str(run_b): 3})
    named = synced_latest(fs, str(tmp_path / "tune"))
    assert prune_trial(fs, str(run_a), named[str(run_a)], keep=2) == list(range(3, 8))
    assert prune_trial(fs, str(run_b), named[str(run_b)], keep=2) == [0, 1]
    assert copy_indices(fs, str(run_a)) == [8, 9] and copy_indices(fs, str(run_b)) == [2, 3]


def test_an_unreadable_synced_state_deletes_nothing(tmp_path):
    fs = pafs.LocalFileSystem()
    _copies(tmp_path / "tune" / "a", 5)
    assert synced_latest(fs, str(tmp_path / "tune")) == {}  # none written yet
    (tmp_path / "tune" / "experiment_state-2026-01-01_00-00-00.json").write_text('{"trial_data": [["{}", "{')
    assert synced_latest(fs, str(tmp_path / "tune")) == {}  # caught mid-write
    assert synced_latest(fs, str(tmp_path / "nowhere")) == {}
    assert copy_indices(fs, str(tmp_path / "tune" / "a")) == [0, 1, 2, 3, 4]
