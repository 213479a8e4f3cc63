"""`retrain-ray status` for standalone runs: a run directory, a directory of runs and campaigns, an empty one."""

from __future__ import annotations

import io
import json
import shutil

import pytest
from helpers import TINY_RUN, write_config
from recorded_campaign import write_campaign
from rich.console import Console

from retrain_ray.cli import main
from retrain_ray.logs import read_stream
from retrain_ray.results.live import watch

STEPS = 3


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """A real tiny run trained to its end (`final` checkpoint)."""
    from retrain_ray.config import load_config
    from retrain_ray.run.train import train_run

    root = tmp_path_factory.mktemp("status")
    run_dir = root / "logs" / "tiny"
    toml = write_config(root / "run.toml", base=TINY_RUN, logging={"log_dir": str(run_dir)},
                        training={"max_steps": STEPS})
    train_run(load_config(toml), run_name="tiny", run_dir=run_dir)
    return run_dir


def _status_json(capsys, *args: str) -> dict:
    assert main(["status", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_status_of_a_single_finished_run_dir(finished_run, capsys):
    [run] = _status_json(capsys, str(finished_run))["runs"]
    last = read_stream(finished_run, "metrics").to_pylist()[-1]
    assert run["status"] == "completed" and run["step"] == STEPS - 1 and run["max_steps"] == STEPS
    assert run["condition"] == last["condition"] and run["run_name"] == "tiny"
    for key in ("mean_reward", "correct_rate", "tokens_per_second", "sample_time_s", "train_time_s"):
        assert run[key] == pytest.approx(last[key]), key
    assert run["wall_time_s"] == pytest.approx(sum(r["step_time_s"] for r in read_stream(finished_run).to_pylist()))
    assert 0 <= run["last_update_s"] < 3600
    assert main(["status", str(finished_run)]) == 0
    text = capsys.readouterr().out
    assert "Runs: 0 running, 0 stale, 1 done" in text
    assert f"{finished_run} {last['condition']} step={STEPS}/{STEPS} " in text and "[completed]" in text
    assert "tok/s=" in text and "sample=" in text and "train=" in text and "updated=" in text


def test_status_of_a_dir_with_one_run_and_one_campaign(finished_run, tmp_path, capsys):
    shutil.copytree(finished_run, tmp_path / "tiny")
    (tmp_path / "camp").mkdir()
    write_campaign(tmp_path / "camp")
    info = _status_json(capsys, str(tmp_path))
    assert [r["dir"] for r in info["runs"]] == [str(tmp_path / "tiny")]  # the campaign's runs are not standalone
    assert [c["campaign"] for c in info["campaigns"]] == ["camp"]
    assert main(["status", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert "Campaigns: 1 " in text and "1 done" in text and "fast_s1" not in text.split("Runs:")[0]
    assert f"{tmp_path / 'tiny'} " in text and "camp" in text
    out = io.StringIO()
    assert watch(tmp_path, interval_s=0.01, count=2, console=Console(file=out, width=300, color_system=None)) == 0
    watched = out.getvalue()
    assert f"{tmp_path / 'tiny'} " in watched and "[completed]" in watched and "seed 1" in watched


def test_status_of_an_empty_dir_says_what_it_looks_for(tmp_path, capsys):
    assert main(["status", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"no run (a directory with metrics.arrows) or campaign (a directory with manifest.json) in {tmp_path}" in err
    out = io.StringIO()
    watch(tmp_path, interval_s=0.01, count=1, console=Console(file=out, width=300, color_system=None))
    assert "no run" in out.getvalue()
