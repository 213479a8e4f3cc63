"""Divergence (issue 26, class 7): `lr = 1e6` blows the weights up; the run says so at the onset, logs
every row, and stops with a clear error when `[training] stop_on_divergence` is on."""

from __future__ import annotations

import logging
import math

import pytest
from helpers import GRPO, write_config

from retrain_ray.cli import main as cli_main
from retrain_ray.config import ConfigError, RetrainConfig, load_config
from retrain_ray.config.build import build_config
from retrain_ray.logs import read_stream
from retrain_ray.run.divergence import MIN_HISTORY, DivergenceError, DivergenceWatch
from retrain_ray.run.train import train_run


def _row(step: int, **values) -> dict:
    return {"step": step, "trained": True, "loss": 0.1, **values}


def test_watch_flags_nonfinite_values_and_a_weight_blow_up_in_one_update():
    watch = DivergenceWatch(100.0)
    assert watch.observe(_row(0, grad_norm=1.0, weight_norm=20.0, weight_norm_growth=1.001)) is None
    found = watch.observe(_row(1, grad_norm=1.0, weight_norm=4e8, weight_max_abs=1e6, weight_norm_growth=2e7))
    assert found is not None and found.onset and found.step == 1
    assert "training diverged at step 1: the weight norm grew 2e+07-fold in one update" in found.describe()
    assert "largest weight |w| = 1e+06" in found.describe()
    nan = DivergenceWatch(0.0).observe(_row(2, loss=math.nan, weight_norm=math.inf, weight_norm_growth=1e9))
    assert nan is not None and nan.reasons == ("loss is nan", "weight_norm is inf")  # factor 0: no growth test


def test_watch_compares_norms_with_the_median_of_healthy_updates_and_warns_once_per_onset():
    watch = DivergenceWatch(10.0)
    for step, norm in enumerate([1.0, 3.0, 2.0]):
        assert watch.observe(_row(step, grad_norm=norm)) is None
    assert watch.observe(_row(3, grad_norm=0.0)) is None  # an update without action tokens: not a baseline
    assert watch.observe({"step": 4, "trained": False, "grad_norm": None}) is None  # no update, nothing to watch
    assert watch.observe(_row(5, grad_norm=19.9)) is None  # under 10 x the median 2.0
    first = watch.observe(_row(6, grad_norm=30.0))  # the median of 1, 3, 2, 19.9 is 2.5
    assert first is not None and first.onset
    assert "grad_norm = 30 is 12 times its median of the last 4 updates (2.5; limit 10 times)" in first.reasons[0]
    again = watch.observe(_row(7, grad_norm=400.0))  # still diverging: not a new onset, baseline unmoved
    assert again is not None and not again.onset and "160 times" in again.reasons[0]
    assert watch.observe(_row(8, grad_norm=2.5)) is None  # recovered
    assert watch.observe(_row(9, grad_norm=50.0)).onset  # a new onset


def test_watch_needs_a_few_updates_before_it_has_a_baseline():
    watch = DivergenceWatch(10.0)
    for step in range(MIN_HISTORY):
        assert watch.observe(_row(step, grad_norm=10.0 ** (3 * step))) is None  # 1, 1e3, 1e6: no baseline yet


def test_divergence_keys_default_and_bounds():
    t = RetrainConfig().training
    assert (t.divergence_factor, t.stop_on_divergence) == (100.0, False)
    build_config({"training": {"divergence_factor": 0.0, "stop_on_divergence": True}})
    with pytest.raises(ConfigError) as info:
        build_config({"training": {"divergence_factor": 0.5}})
    assert "training.divergence_factor" in info.value.locations and "above 1" in str(info.value)


def _huge_lr(tmp_path, **training):
    return write_config(
        tmp_path / "huge.toml", algorithm=GRPO, logging={"log_dir": str(tmp_path / "run")},
        reward={"type": "custom", "custom_module": "operator:lt"},  # nearly every group splits: every step trains
        training={"batch_size": 2, "group_size": 16, "max_tokens": 4, "max_steps": 4, "save_every": 0,
                  "lr": 1e6, **training})


def test_a_huge_lr_warns_at_the_onset_and_logs_every_row(tmp_path, caplog):
    path = _huge_lr(tmp_path)
    with caplog.at_level(logging.WARNING, logger="retrain_ray.run.loop"):
        outcome = train_run(load_config(path), run_name="huge", run_dir=tmp_path / "run")
    assert outcome.status == "completed"
    warnings = [r.getMessage() for r in caplog.records if "training diverged" in r.getMessage()]
    assert len(warnings) == 1, warnings  # once per onset, not once per step
    assert warnings[0].startswith("huge: training diverged at step 0: the weight norm grew")
    rows = read_stream(tmp_path / "run").to_pylist()
    assert [r["step"] for r in rows] == [0, 1, 2, 3]
    assert rows[0]["weight_norm_growth"] > 1e4 and rows[0]["weight_max_abs"] >= 1e5
    assert all(r["grad_norm"] is not None and r["weight_norm"] is not None for r in rows if r["trained"])


def test_stop_on_divergence_fails_the_run_with_a_clear_error(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(logging.root, "handlers", [])  # basicConfig of an earlier test bound a closed stream
    path = _huge_lr(tmp_path, stop_on_divergence=True)
    with pytest.raises(DivergenceError, match=r"training diverged at step 0: .* lower \[training\] lr \(now 1e\+06"):
        train_run(load_config(path), run_name="huge", run_dir=tmp_path / "run")
    assert [r["step"] for r in read_stream(tmp_path / "run").to_pylist()] == [0]  # its row is logged
    assert not (tmp_path / "run" / "checkpoints" / "final").exists()
    assert cli_main(["train", str(path), "--quiet", "--log-dir", str(tmp_path / "cli")]) == 1
    err = capsys.readouterr().err
    assert "training diverged at step 0" in err and "stop_on_divergence = true" in err
    assert err.count("Traceback") == err.count("--- Logging error ---")
