"""Tune's experiment-state snapshot period grows with the campaign past SNAPSHOT_RUNS runs (a snapshot writes every
trial's state), and a period the user set in TUNE_GLOBAL_CHECKPOINT_S is kept."""

from __future__ import annotations

import os

import pytest

from retrain_ray.campaign.experiment import STATE_SYNC_S, _set_state_period, state_period_s


def test_the_period_is_fixed_up_to_a_hundred_runs_then_grows_with_them():
    assert [state_period_s(n) for n in (1, 100, 101, 500, 1000)] == [STATE_SYNC_S, STATE_SYNC_S, 3, 10, 20]


def test_a_users_period_stands_and_the_campaigns_own_is_rescaled(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("TUNE_GLOBAL_CHECKPOINT_S", "2")  # campaign/local_ray.py's default
    assert _set_state_period(1000) == 20
    assert os.environ["TUNE_GLOBAL_CHECKPOINT_S"] == "20"
    assert _set_state_period(10) == STATE_SYNC_S  # a later, smaller campaign in the same process
    assert os.environ["TUNE_GLOBAL_CHECKPOINT_S"] == "2"
    monkeypatch.setenv("TUNE_GLOBAL_CHECKPOINT_S", "3600")
    assert _set_state_period(1000) == STATE_SYNC_S
    assert os.environ["TUNE_GLOBAL_CHECKPOINT_S"] == "3600"
