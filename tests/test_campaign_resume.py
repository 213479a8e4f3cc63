"""A campaign driver killed with SIGKILL mid-campaign, then resumed with `retrain-ray resume DIR`.

The driver is a child process in its own session with its own local Ray (no RAY_ADDRESS, its own
RAY_TMPDIR), so it cannot join this test session's Ray; after the kill, exactly the processes of
that session (and of that Ray temp dir) are killed. The resumed driver must leave none behind.
"""

from __future__ import annotations

import signal
import subprocess

import pyarrow as pa
import pytest
from campaign_helpers import (
    PYTHON,
    isolated_env,
    kill_owned,
    owned_pids,
    read_manifest,
    remove_temp_dir,
    short_temp_dir,
    start,
)
from helpers import wait_for, write_campaign

from retrain_ray.logs import read_stream
from retrain_ray.logs.stream import segment_paths

STEPS = 8
SECTIONS = {
    "reward": {"type": "custom", "custom_module": "operator:lt"},
    # group_size 16: every group splits (no step without an update, hence no row)
    "training": {"batch_size": 2, "group_size": 16, "max_tokens": 4, "lr": 3e-3, "save_every": 2, "sft_warmup_steps": 2},
    "logging": {"log_dir": "logs/x"},
}
CAMPAIGN = {"name": "killed", "seeds": [1, 2], "max_steps": STEPS, "parallel": False, "max_failures": 0,
            "trial_start_timeout_s": 120}
FIRST, SECOND = "grpo+none_s1", "grpo+none_s2"


def _killable(cdir):
    """The first run finished and the second reported its checkpoint after step index 5: its checkpoint
    after step 1 is then >= 2 s old, so Tune's synced experiment state knows it."""
    manifest = read_manifest(cdir)
    if manifest is None:
        return False
    runs = {r["run_name"]: r for r in manifest["runs"]}
    second = runs[SECOND]
    return runs[FIRST]["status"] == "completed" and second["result"].get("step", -1) >= 5


def _segment_steps(path) -> list[int]:
    """Steps in one Arrow stream segment (a killed writer may have left a partial last batch)."""
    steps = []
    with pa.OSFile(str(path)) as source:
        reader = pa.ipc.open_stream(source)
        try:
            for batch in reader:
                steps += batch.column("step").to_pylist()
        except (pa.ArrowInvalid, OSError):
            pass
    return steps


def _run_to_end(cmd, env, log, timeout_s):
    """Runs a driver to its end; on a timeout kills its whole session. Returns (rc, session id)."""
    proc = start(cmd, env=env, log=log)
    try:
        return proc.wait(timeout=timeout_s), proc.pid
    except subprocess.TimeoutExpired:
        kill_owned(proc.pid, None)
        raise


@pytest.mark.slow
@pytest.mark.timeout(600)  # two campaign drivers back to back; 285 s seen at load average 40
def test_killed_driver_resumes_without_rerunning_finished_runs(tmp_path):
    toml = write_campaign(tmp_path / "killed.toml", **SECTIONS, campaign=CAMPAIGN)
    cdir = tmp_path / "killed"
    ray_tmp = short_temp_dir("rrk")
    driver = start([PYTHON, "tests/campaign_driver.py", str(toml), "--root", str(tmp_path), "--step-delay", "0.5"],
                   env=isolated_env(ray_tmp), log=tmp_path / "driver1.log")
    try:
        wait_for(lambda: _killable(cdir) or driver.poll() is not None, timeout_s=240, what="a half-done campaign")
        assert driver.poll() is None, (tmp_path / "driver1.log").read_text()[-3000:]
        driver.send_signal(signal.SIGKILL)
        driver.wait(timeout=30)
    finally:
        kill_owned(driver.pid, ray_tmp)
        remove_temp_dir(ray_tmp)
    assert owned_pids(driver.pid, ray_tmp) == []
    before = read_manifest(cdir)
    assert before["status"] == "running" and {r["run_name"]: r["status"] for r in before["runs"]}[SECOND] == "running"

    resume_tmp = short_temp_dir("rrr")
    rc, pid = _run_to_end([PYTHON, "-m", "retrain_ray.cli", "resume", str(cdir)],
                          isolated_env(resume_tmp), tmp_path / "driver2.log", timeout_s=240)
    try:
        log = (tmp_path / "driver2.log").read_text()
        assert rc == 0, log[-3000:]
        assert f"results: {cdir}" in log
        # the resumed driver shut its own Ray down on exit: nothing of its session or temp dir is left
        assert wait_for(lambda: owned_pids(pid, resume_tmp) == [], timeout_s=30, what="the driver's Ray to exit")
    finally:
        kill_owned(pid, resume_tmp)
        remove_temp_dir(resume_tmp)

    manifest = read_manifest(cdir)
    assert manifest["status"] == "done" and len(manifest["sessions"]) == 2
    runs = {r["run_name"]: r for r in manifest["runs"]}
    assert (runs[FIRST]["attempts"], runs[SECOND]["attempts"]) == (1, 2)  # the finished run was not rerun
    for run in (FIRST, SECOND):
        steps = read_stream(cdir / "runs" / run)["step"].to_pylist()
        assert steps == list(range(STEPS))  # every step once
    first_raw = read_stream(cdir / "runs" / FIRST, key=None)["step"].to_pylist()
    assert sorted(first_raw) == list(range(STEPS))  # written in one session only
    segments = segment_paths(cdir / "runs" / SECOND, "metrics")
    assert len(segments) == 2
    killed_steps, resumed_steps = (_segment_steps(p) for p in segments)
    # the second session continued after one of the run's checkpoints (steps 1, 3, 5), not from scratch
    assert resumed_steps == list(range(resumed_steps[0], STEPS))
    assert resumed_steps[0] in (2, 4, 6) and resumed_steps[0] <= max(killed_steps) + 1
