"""`explain --calibrate`: figures read from a real pilot campaign's logs, and an estimate built on them."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import GRPO, write_campaign

from retrain_ray.campaign import Campaign
from retrain_ray.campaign.capacity.calibration import Calibration, read_calibration
from retrain_ray.campaign.capacity.explain import plan_capacity
from retrain_ray.cli.explain import explain_main
from retrain_ray.config import expand_runs, load_config

MAXRL = {"advantage_mode": "maxrl", "transform_mode": "none"}
ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow  # a real two-run pilot campaign (module fixture)


def _toml(path: Path, *, seeds: list[int], steps: int, log_dir: Path) -> Path:
    return write_campaign(
        path, backend={"devices": "cpu"},
        reward={"type": "custom", "custom_module": "operator:lt"},  # group_size 16: every RL step trains
        training={"batch_size": 2, "group_size": 16, "max_tokens": 4, "lr": 3e-3, "save_every": 2,
                  "sft_warmup_steps": 2},
        logging={"log_dir": str(log_dir)},
        campaign={"name": "cal", "seeds": seeds, "max_steps": steps, "parallel": True, "max_workers": 2},
        conditions=[GRPO, MAXRL])


@pytest.fixture(scope="module")
def pilot(ray_4cpu_4gpu, tmp_path_factory) -> Path:
    """One seed, 4 of the full campaign's 10 steps: 2 warm-start and 2 RL steps per run."""
    root = tmp_path_factory.mktemp("pilot")
    toml = _toml(root / "pilot.toml", seeds=[1], steps=4, log_dir=root / "logs")
    Campaign.from_toml(toml, root=root / "campaigns").run(progress=False)
    return root / "campaigns" / "cal"


def test_figures_from_the_pilots_logs(pilot) -> None:
    cal = read_calibration(pilot.parent)  # a directory holding the campaign
    assert {r.run_name for r in cal.runs} == {"grpo+none_s1", "maxrl+none_s1"}
    for run in cal.runs:
        assert run.warm_start is not None and run.warm_start.steps == 2 and run.warm_start_ended
        assert run.rl is not None and run.rl.steps == 2 and run.rl.median_step_time_s > 0
        assert run.rl.overhead >= 1.0
        assert run.startup_s is not None and run.startup_s >= 0 and run.teardown_s is not None
        assert run.checkpoint_bytes and run.checkpoint_bytes > 0
        assert run.tokens_per_s and run.max_token_hit_rate is not None
    (campaign,) = cal.campaigns
    assert campaign.runs == 2 and campaign.max_concurrent == 2
    assert campaign.startup_s is not None and campaign.startup_s > 0
    assert campaign.teardown_s is not None and campaign.wall_time_s is not None


def _scaled(cal: Calibration, factor: float) -> Calibration:
    """The same pilot with every step `factor` times as long (its rows as far apart)."""
    def scale(phase):
        return None if phase is None else dataclasses.replace(
            phase, recent_step_times=tuple(t * factor for t in phase.recent_step_times),
            step_time_sum=phase.step_time_sum * factor, wall_span_sum=phase.wall_span_sum * factor)
    runs = tuple(dataclasses.replace(r, warm_start=scale(r.warm_start), rl=scale(r.rl)) for r in cal.runs)
    return dataclasses.replace(cal, runs=runs)


def test_the_estimate_uses_the_pilots_step_times_and_start_up(pilot, tmp_path) -> None:
    cfg = load_config(_toml(tmp_path / "full.toml", seeds=[1, 2], steps=10, log_dir=tmp_path / "logs"))
    specs = expand_runs(cfg)
    cal = read_calibration(pilot)

    def wall(c: Calibration):
        return plan_capacity(cfg, cfg.campaign, specs, calibration=c, how="test", median_step_time=None,
                             gpus_per_run=0, gpus_available=None).estimate

    once, twice = wall(cal), wall(_scaled(cal, 2.0))
    steps_once = once.warm_start_seconds + once.rl_seconds
    assert steps_once > 0 and twice.warm_start_seconds + twice.rl_seconds == pytest.approx(2 * steps_once)
    assert once.campaign_startup_s == twice.campaign_startup_s > 0  # measured, not scaled
    assert once.wall_time_s > once.campaign_startup_s + steps_once / 2  # 4 runs over 2 slots, plus start-ups
    assert twice.wall_time_s > once.wall_time_s
    assert once.checkpoint is not None and once.checkpoint.runs == 4


def test_explain_calibrate_json_and_earlier_runs(pilot, tmp_path, capsys) -> None:
    full = _toml(tmp_path / "full.toml", seeds=[1, 2], steps=10, log_dir=tmp_path / "logs")
    assert explain_main([str(full), "--json", "--calibrate", str(pilot)]) == 0
    cap = json.loads(capsys.readouterr().out)["campaign"]["capacity"]
    assert cap["calibrated"] and "--calibrate" in cap["calibration"]
    assert cap["parts"]["campaign_startup_s"] > 0 and cap["effective_parallelism"] == 2
    assert set(cap["step_times"]) == {"grpo+none", "maxrl+none"}
    assert all(t["source"] == "condition" for t in cap["step_times"].values())
    assert any(r.startswith("wall time with max_workers = 2") for r in cap["recommendations"])

    assert explain_main([str(full), "--json"]) == 0  # no earlier run of this campaign under its log_dir
    cap = json.loads(capsys.readouterr().out)["campaign"]["capacity"]
    assert not cap["calibrated"] and cap["calibration"].startswith("uncalibrated")
    assert cap["median_step_time_s"] == 10.0
    shutil.copytree(pilot, tmp_path / "logs" / "cal")  # an earlier run of the same [campaign] name
    assert explain_main([str(full), "--json", "--gpus", "0"]) == 0
    cap = json.loads(capsys.readouterr().out)["campaign"]["capacity"]
    assert cap["calibrated"] and "earlier runs of this campaign" in cap["calibration"]

    assert explain_main([str(full), "--calibrate", str(tmp_path / "nothing")]) == 2
    assert "--calibrate" in capsys.readouterr().err


def test_a_pilot_warm_start_capped_by_its_own_sft_warmup_steps_is_not_trusted(pilot, tmp_path, capsys) -> None:
    """The pilot's warm start ran its own 2 steps (no target): a campaign whose warm start runs up to 8
    steps until a target correct rate is estimated at the full 8 (an upper bound), with a warning; the
    pilot's 2 steps made it 2 before (issue 34: a 2-step pilot made a 100-step warm start 48 s)."""
    assert all(r.warm_start_capped for r in read_calibration(pilot).runs)

    def full(target: float) -> Path:
        return write_campaign(
            tmp_path / f"full{target}.toml", backend={"devices": "cpu"},
            reward={"type": "custom", "custom_module": "operator:lt"}, logging={"log_dir": str(tmp_path / "logs")},
            training={"batch_size": 2, "group_size": 16, "max_tokens": 4, "lr": 3e-3, "save_every": 2,
                      "sft_warmup_steps": 8, "sft_target_correct_rate": target},
            campaign={"name": "cal", "seeds": [1, 2], "max_steps": 10, "parallel": True, "max_workers": 2},
            conditions=[GRPO, MAXRL])

    def capacity(toml: Path):
        cfg = load_config(toml)
        return plan_capacity(cfg, cfg.campaign, expand_runs(cfg), calibration=read_calibration(pilot), how="test",
                             median_step_time=None, gpus_per_run=0, gpus_available=None)

    targeted, fixed = capacity(full(0.2)), capacity(full(0.0))
    assert targeted.estimate.warm_start_seconds == pytest.approx(fixed.estimate.warm_start_seconds)
    [warning] = [r for r in targeted.recommendations if r.startswith("warning:")]
    assert "2 steps) without reaching sft_target_correct_rate = 0.2" in warning
    assert "assumes the full 8 warm-start steps" in warning
    assert not [r for r in fixed.recommendations if r.startswith("warning:")]
    assert explain_main([str(full(0.2)), "--calibrate", str(pilot)]) == 0
    assert "-> warning: 2 pilot run(s)" in capsys.readouterr().out


def test_explain_asks_the_connected_cluster_for_its_gpus(ray_4cpu_4gpu, tmp_path) -> None:
    """With RAY_ADDRESS set, explain connects to that Ray (never starts one) and plans with its GPUs."""
    toml = _toml(tmp_path / "full.toml", seeds=[1], steps=4, log_dir=tmp_path / "logs")
    address = ray_4cpu_4gpu.get_runtime_context().gcs_address
    env = {**os.environ, "RAY_ADDRESS": address, "RAY_AUTH_MODE": "disabled", "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-m", "retrain_ray.cli", "explain", str(toml), "--json"], cwd=tmp_path,
                         env=env, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["campaign"]["gpus_available"] == 4


def test_detect_on_a_one_seed_pilot_says_the_spread_needs_two_seeds(pilot, tmp_path, capsys) -> None:
    full = _toml(tmp_path / "full.toml", seeds=[1, 2], steps=10, log_dir=tmp_path / "logs")
    assert explain_main([str(full), "--calibrate", str(pilot), "--detect", "0.05"]) == 0
    out = capsys.readouterr().out
    assert "seeds needed: the pilot in" in out and "has fewer than 2 seeds per condition (grpo+none: 1, maxrl+none: 1)" \
        in out and "seed-to-seed sd" not in out
