"""`retrain-ray bottleneck`: the per-part shares of step time, the verdict, and the CLI on a real run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import TINY_RUN, write_config

from retrain_ray.results.bottleneck import breakdown, by_condition, split_row

ROOT = Path(__file__).resolve().parents[2]


def _row(step: float, sample: float = 0.0, score: float = 0.0, train: float = 0.0, **extra: float) -> dict:
    return {"step_time_s": step, "sample_time_s": sample, "score_time_s": score, "train_time_s": train,
            "advantage_time_s": 0.0, "sync_time_s": 0.0, **extra}


def test_split_row_takes_waits_out_of_sampling_and_keeps_the_rest() -> None:
    parts = split_row(_row(10.0, sample=6.0, score=1.0, train=2.0, throttle_wait_s=4.0))
    assert parts == {"sample": 2.0, "score": 1.0, "advantage": 0.0, "train": 2.0, "sync": 0.0,
                     "wait": 4.0, "other": 1.0}


def test_verdict_model() -> None:
    b = breakdown([_row(10.0, sample=5.0, score=1.0, train=3.0), _row(10.0, sample=6.0, score=1.0, train=2.0)])
    assert b.shares["sample"] == pytest.approx(0.55) and b.shares["other"] == pytest.approx(0.1)
    assert b.bottleneck == "model" and "max_tokens" in b.knob


def test_verdict_verification() -> None:
    b = breakdown([_row(10.0, sample=2.0, score=6.0, train=1.0)])
    assert b.bottleneck == "verification" and "[reward] workers" in b.knob


def test_verdict_network_from_waits_and_from_a_retrying_remote_sampler() -> None:
    assert breakdown([_row(10.0, sample=7.0, train=1.0, engine_wait_s=6.0)]).bottleneck == "network"
    remote = breakdown([_row(10.0, sample=6.0, train=2.0, endpoint_errors=3.0)])
    assert remote.bottleneck == "network" and "max_concurrent" in remote.knob


def test_verdict_orchestration_and_untrained_rows() -> None:
    rows = [_row(10.0, sample=1.0, score=1.0, train=1.0),
            {"step_time_s": 5.0, "sample_time_s": 1.0, "trained": False}]  # a step that did not train
    b = breakdown(rows)
    assert b.seconds["other"] == pytest.approx(11.0)
    assert b.bottleneck == "orchestration" and "max_workers" in b.knob


def test_by_condition_pools_the_runs_of_a_condition() -> None:
    runs = {"a_s1": ("a", [_row(4.0, score=3.0)]), "a_s2": ("a", [_row(4.0, score=3.0)]),
            "b_s1": ("b", [_row(4.0, sample=3.0)])}
    conditions = by_condition(runs)
    assert conditions["a"].steps == 2 and conditions["a"].bottleneck == "verification"
    assert conditions["b"].bottleneck == "model"


def test_cli_on_a_real_run(tmp_path) -> None:
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    config = write_config(tmp_path / "run.toml", base=TINY_RUN)
    run_dir = tmp_path / "run"
    cli = [sys.executable, "-m", "retrain_ray.cli"]
    trained = subprocess.run([*cli, "train", str(config), "--log-dir", str(run_dir), "--max-steps", "4", "--quiet"],
                             cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    assert trained.returncode == 0, trained.stderr
    out = subprocess.run([*cli, "bottleneck", str(tmp_path), "--json"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    (run,) = report["runs"].values()
    assert run["steps"] == 4
    assert sum(run["shares"].values()) == pytest.approx(1.0)
    assert run["bottleneck"] in ("model", "verification", "network", "orchestration")
    text = subprocess.run([*cli, "bottleneck", str(run_dir)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert text.returncode == 0 and "score" in text.stdout and "->" in text.stdout
    missing = subprocess.run([*cli, "bottleneck", str(tmp_path / "nothing")], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=120)
    assert missing.returncode == 2 and "not a directory" in missing.stderr and "Traceback" not in missing.stderr


def test_the_column_breakdown_of_a_campaign_equals_the_row_by_row_one(tmp_path) -> None:
    """`retrain-ray bottleneck` on a campaign reads columns (results/bottleneck_frames.py): per run and per
    condition it finds what `breakdown` finds row by row, waits of any `*wait*_s` column included."""
    from recorded_campaign import write_campaign

    from retrain_ray.logs import read_stream
    from retrain_ray.results.bottleneck_frames import read_breakdowns

    write_campaign(tmp_path, parquet_every_s=3600.0)
    run_dirs = sorted((tmp_path / "runs").iterdir())
    per_run, conditions = read_breakdowns(tmp_path, run_dirs)
    rows = {d.name: read_stream(d).to_pylist() for d in run_dirs}
    assert set(per_run) == {f"runs/{name}" for name in rows}
    for name, run_rows in rows.items():
        condition, mine = per_run[f"runs/{name}"]
        expected = breakdown(run_rows)
        assert condition == run_rows[-1]["condition"] and mine.steps == expected.steps
        assert mine.seconds == pytest.approx(expected.seconds) and mine.bottleneck == expected.bottleneck
    pooled = by_condition({n: (r[-1]["condition"], r) for n, r in rows.items()})
    assert list(conditions) == list(pooled)
    assert all(conditions[c].seconds == pytest.approx(pooled[c].seconds) for c in pooled)
    one = tmp_path / "runs" / run_dirs[0].name
    alone, _ = read_breakdowns(one, [one])  # DIR a run itself: named by its directory
    assert list(alone) == [one.name]
