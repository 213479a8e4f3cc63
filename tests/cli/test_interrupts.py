"""Ctrl-C and SIGTERM on the real CLI: exit 130 (143), no traceback, where it stopped, and the exact command
that continues it, which then runs to the end with one row per step."""

from __future__ import annotations

import os
import signal
import subprocess

import pytest
from campaign_helpers import (
    cli_cmd,
    cli_env,
    continue_command,
    manifest_runs,
    own_session,
    read_manifest,
    remove_temp_dir,
    repo_path,
    rows_logged,
    run_rows,
    run_to_end,
    short_temp_dir,
    slow_workdir,
    start,
    steps_once,
)
from helpers import GRPO, TINY_RUN, wait_for, write_campaign, write_config

STEPS = 10


def _continue_command(text: str) -> list[str]:
    command = continue_command(text)
    assert command, text[-3000:]
    return command


@pytest.mark.slow
@pytest.mark.timeout(420)
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl_c", "sigterm"])
def test_an_interrupted_train_says_where_it_stopped_and_its_command_continues_it(tmp_path, signum):
    work = slow_workdir(tmp_path)
    toml = write_config(work / "run.toml", base=TINY_RUN, reward={"type": "slow_reward.make"},
                        training={"max_steps": STEPS, "save_every": 2}, logging={"log_dir": "logs/run"})
    run_dir = work / "logs" / "run"
    ray_tmp = short_temp_dir("rri")
    log = tmp_path / "train.log"
    proc = start(cli_cmd("train", str(toml), "--quiet", "--lr", "0.003"), env=cli_env(ray_tmp), log=log, cwd=work)
    try:
        wait_for(lambda: run_rows(run_dir) >= 3 or proc.poll() is not None, timeout_s=180, what="three rows")
        assert proc.poll() is None, log.read_text()[-3000:]
        os.killpg(proc.pid, signum)  # as a terminal's Ctrl-C does: the whole process group
        rc = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        remove_temp_dir(ray_tmp)
    out = log.read_text()
    assert rc == 128 + signum, out[-3000:]
    assert "Traceback" not in out and "KeyboardInterrupt" not in out
    assert "interrupted by" in out and "last checkpoint: after step" in out
    command = _continue_command(out)
    assert command[3:] == ["train", str(toml), "--quiet", "--lr", "0.003", "--resume", "logs/run"]

    resumed = subprocess.run(command, cwd=work, env=cli_env(tmp_path), capture_output=True,
                                           text=True, timeout=300)
    assert resumed.returncode == 0, (resumed.stdout + resumed.stderr)[-3000:]
    assert not steps_once(run_dir, STEPS)  # continued to the end: every step once


CAMPAIGN = {"name": "stopped", "seeds": [1, 2], "max_steps": 6, "parallel": False, "max_failures": 0,
            "trial_start_timeout_s": 120}


@pytest.mark.extended  # about a minute: `make test-extended` (CI) runs it
@pytest.mark.timeout(600)
def test_ctrl_c_on_a_campaign_exits_130_with_each_run_state_and_resume_continues_it(tmp_path):
    work = slow_workdir(tmp_path)
    toml = write_campaign(work / "stopped.toml", base=TINY_RUN, campaign=CAMPAIGN, conditions=(GRPO,),
                          reward={"type": "slow_reward.make"})
    cdir = tmp_path / "stopped"
    log = tmp_path / "driver1.log"
    with own_session(cli_cmd(str(toml), "--root", str(tmp_path)), log=log, prefix="rrc", cwd=work,
                     PYTHONPATH=repo_path()) as (driver, _):
        wait_for(lambda: rows_logged(cdir) >= 2 or driver.poll() is not None, timeout_s=300,
                 what="the campaign's trials to log rows")
        assert driver.poll() is None, log.read_text()[-3000:]
        os.killpg(driver.pid, signal.SIGINT)  # a terminal's Ctrl-C: the driver and every process of its group
        rc = driver.wait(timeout=180)
    out = log.read_text()
    assert rc == 130, out[-3000:]
    assert "Traceback" not in out and "Tuner.restore" not in out and "results:" not in out
    assert "stopped after step" in out and f"continue with: retrain-ray resume {cdir}" in out
    manifest = read_manifest(cdir)
    assert manifest is not None and manifest["status"] == "interrupted"
    assert "running" not in {r["status"] for r in manifest["runs"]}

    rc, left = run_to_end(_continue_command(out), log=tmp_path / "driver2.log", prefix="rrd", timeout_s=400, cwd=work,
                          PYTHONPATH=repo_path())
    assert rc == 0 and left == [], (tmp_path / "driver2.log").read_text()[-3000:]
    runs = manifest_runs(cdir)
    assert runs is not None and {r["status"] for r in runs.values()} == {"completed"}
    for name in runs:
        assert not steps_once(cdir / "runs" / name, CAMPAIGN["max_steps"])
