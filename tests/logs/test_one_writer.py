"""One writer per directory (retrain_ray/logs/dir_lock.py): a second `train` on a run directory in use, or a
second driver of a campaign in use, stops at once naming the holder; a lock left by a dead process is
taken over with a warning naming it."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys

import pytest
from campaign_helpers import (
    cli_cmd,
    cli_env,
    driver_cmd,
    own_session,
    read_manifest,
    remove_temp_dir,
    run_rows,
    run_to_end,
    short_temp_dir,
    slow_workdir,
    start,
)
from helpers import TINY_RUN, wait_for, write_campaign, write_config

from retrain_ray.logs import read_stream
from retrain_ray.logs.dir_lock import HOLDER_FILE, DirectoryInUse, DirLock, read_holder

STEPS = 8


def _flat(text: str) -> str:
    return " ".join(text.split())  # rich wraps long lines on a pipe


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_second_train_on_a_run_directory_in_use_stops_at_once_naming_the_holder(tmp_path):
    work = slow_workdir(tmp_path)
    toml = write_config(work / "run.toml", base=TINY_RUN, reward={"type": "slow_reward.make"},
                        training={"max_steps": STEPS}, logging={"log_dir": "logs/run"})
    run_dir = work / "logs" / "run"
    ray_tmp = short_temp_dir("rrw")
    first = start(cli_cmd("train", str(toml), "--quiet"), env=cli_env(ray_tmp), log=tmp_path / "first.log", cwd=work)
    try:
        wait_for(lambda: run_rows(run_dir) >= 1 or first.poll() is not None, timeout_s=180, what="the first row")
        assert first.poll() is None, (tmp_path / "first.log").read_text()[-3000:]
        # another seed: before the lock, this one died on a checkpoint rename and the log mixed both runs
        second = subprocess.run(cli_cmd("train", str(toml), "--quiet", "--seed", "3"), cwd=work,
                                env=cli_env(ray_tmp), capture_output=True, text=True, timeout=120)
        out = _flat(second.stdout + second.stderr)
        assert second.returncode == 2, out
        assert "Traceback" not in out
        assert f"locked by pid {first.pid} on host" in out and f"kill {first.pid}" in out and "--log-dir" in out
        assert read_holder(run_dir)["pid"] == first.pid  # the second wrote nothing there
        assert first.wait(timeout=240) == 0, (tmp_path / "first.log").read_text()[-3000:]
    finally:
        if first.poll() is None:
            first.kill()
            first.wait(timeout=30)
        remove_temp_dir(ray_tmp)
    assert read_stream(run_dir, key=None)["step"].to_pylist() == list(range(STEPS))  # one row per step, one run
    assert not (run_dir / HOLDER_FILE).exists()  # released cleanly


HOLD = """
import sys, time
from retrain_ray.logs.dir_lock import DirLock
lock = DirLock(sys.argv[1], what="run")
lock.acquire()
print("locked", flush=True)
time.sleep(120)
"""


def test_a_lock_left_by_a_killed_process_is_taken_over_with_a_warning(tmp_path, caplog):
    run_dir = tmp_path / "run"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(run_dir)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        with pytest.raises(DirectoryInUse, match=f"locked by pid {holder.pid} on host .*kill {holder.pid}"):
            DirLock(run_dir, what="run").acquire()
    finally:
        holder.send_signal(signal.SIGKILL)  # dies holding it: the kernel frees the lock, its holder file stays
        holder.wait(timeout=30)
    assert read_holder(run_dir)["pid"] == holder.pid

    lock = DirLock(run_dir, what="run")
    with caplog.at_level(logging.WARNING, logger="retrain_ray.logs.dir_lock"):
        lock.acquire()
    assert f"taking over run directory {run_dir}: it was left locked by pid {holder.pid}" in caplog.text
    assert "which is gone" in caplog.text
    assert read_holder(run_dir)["pid"] == os.getpid()
    lock.release()
    assert not (run_dir / HOLDER_FILE).exists()

    fresh = DirLock(tmp_path / "fresh", what="run")
    fresh.acquire()
    fresh.release()
    assert not (tmp_path / "fresh").exists()  # a directory the lock made and nothing else wrote to goes again


CAMPAIGN = {"name": "busy", "seeds": [1, 2], "max_steps": 6, "parallel": False, "max_failures": 0,
            "trial_start_timeout_s": 120}


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_a_second_driver_of_a_campaign_in_use_stops_at_once_naming_the_first(tmp_path):
    toml = write_campaign(tmp_path / "busy.toml", base=TINY_RUN, campaign=CAMPAIGN)
    cdir = tmp_path / "busy"
    with own_session(driver_cmd(toml, tmp_path, 0.5), log=tmp_path / "driver1.log", prefix="rrl") as (driver, _):
        wait_for(lambda: (read_manifest(cdir) or {}).get("status") == "running" or driver.poll() is not None,
                 timeout_s=240, what="the first driver's campaign to run")
        assert driver.poll() is None, (tmp_path / "driver1.log").read_text()[-3000:]
        holder = read_holder(cdir)
        assert holder is not None and holder["pid"] == driver.pid
        rc, left = run_to_end(cli_cmd(str(toml), "--root", str(tmp_path)), log=tmp_path / "driver2.log",
                              prefix="rrm", timeout_s=120)
        out = _flat((tmp_path / "driver2.log").read_text())
        assert rc == 2 and left == [], out
        assert "Traceback" not in out
        assert f"campaign directory locked by pid {driver.pid} on host" in out and f"kill {driver.pid}" in out
        assert "another name" in out
        manifest = read_manifest(cdir)
        assert manifest is not None and len(manifest["sessions"]) == 1  # the second driver wrote nothing
        assert read_holder(cdir)["pid"] == driver.pid
        assert json.loads((cdir / HOLDER_FILE).read_text())["command"].endswith("--step-delay 0.5")
