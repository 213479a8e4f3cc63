"""`explain FILE --calibrate PILOT --detect D [--power P]` (campaign/capacity/pilot_seeds.py) through the real CLI
on a recorded pilot (tests/recorded_campaign.py: 2 conditions x 3 seeds whose values differ by 0.01 per seed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import GRPO, write_campaign
from recorded_campaign import recorded_campaign_dir

from retrain_ray.cli.explain import explain_main
from retrain_ray.results.seeds_needed import seeds_needed

MAXRL = {"advantage_mode": "maxrl", "transform_mode": "none"}


@pytest.fixture(scope="module")
def pilot(tmp_path_factory) -> Path:
    return recorded_campaign_dir(tmp_path_factory, "seeds_pilot")


def _toml(path: Path) -> Path:
    return write_campaign(path, backend={"devices": "cpu"}, training={"max_tokens": 4},
                          logging={"log_dir": str(path.parent / "logs")},
                          campaign={"name": "full", "seeds": [1, 2], "max_steps": 10}, conditions=[GRPO, MAXRL])


def test_detect_states_the_spread_and_the_seeds_needed(pilot, tmp_path, capsys) -> None:
    toml = _toml(tmp_path / "full.toml")
    assert explain_main([str(toml), "--calibrate", str(pilot), "--detect", "0.01", "--power", "0.9"]) == 0
    out = capsys.readouterr().out
    # within each condition the seeds' means are 0.01 apart (seeds 1, 2, 3): a pooled sd of 0.01
    expected = seeds_needed({"a": [0.01, 0.02, 0.03]}, 0.01, alpha=0.05, power=0.9).seeds_per_condition
    assert "seed-to-seed sd 0.01 (pooled over 6 seeds)" in out
    assert f"a difference of 0.01 needs {expected} seeds per condition (two-sided alpha 0.05, power 0.9" in out

    assert explain_main([str(toml), "--json", "--calibrate", str(pilot), "--detect", "0.02"]) == 0
    needed = json.loads(capsys.readouterr().out)["campaign"]["seeds_needed"]
    assert needed["pilot_seeds"] == {"slow": 3, "fast": 3} and needed["power"] == 0.8
    assert needed["spread"] == pytest.approx(0.01, rel=1e-6)
    assert needed["seeds_per_condition"] == seeds_needed({"a": [0.01, 0.02, 0.03]}, 0.02).seeds_per_condition


def test_detect_without_a_pilot_is_refused(tmp_path, capsys) -> None:
    assert explain_main([str(_toml(tmp_path / "full.toml")), "--detect", "0.05"]) == 2
    assert "--detect needs --calibrate DIR" in capsys.readouterr().err
