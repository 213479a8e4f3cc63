"""`ray job stop` of a campaign submitted with `ray job submit` is answered like Ctrl-C (issue 34 item 3):
Ray's job supervisor sends SIGTERM to the job's process group, then SIGKILL after RAY_JOB_STOP_WAIT_TIME_S
(3 s by default); within those seconds the driver marks the manifest `interrupted` and prints the resume
command into the job's logs, and that command, submitted as a job again, completes every run.

A separate local cluster (`ray start --head`, own ports and temp dir), stopped by killing exactly the
processes it started (never `ray stop`).
"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest
from campaign_helpers import (
    PYTHON,
    cli_env,
    continue_command,
    kill_owned,
    manifest_runs,
    read_manifest,
    rows_logged,
    short_temp_dir,
    slow_workdir,
    steps_once,
)
from helpers import GRPO, TINY_RUN, wait_for, write_campaign
from test_job_submit import RAY, _start_head

STEPS = 12  # long enough that the stop lands mid-campaign on a loaded machine
CAMPAIGN = {"name": "jobstop", "seeds": [1, 2], "max_steps": STEPS, "parallel": False, "max_failures": 0,
            "trial_start_timeout_s": 120}


def _submit(address: str, job_id: str, work: Path, env: dict[str, str], *command: str) -> None:
    subprocess.run([RAY, "job", "submit", "--no-wait", "--address", address, "--submission-id", job_id,
                    "--working-dir", str(work), "--", *command],
                   env=env, capture_output=True, text=True, timeout=120, check=True)


@pytest.mark.extended  # a cluster, a campaign stopped after its first step, and its resume: a few minutes
@pytest.mark.cluster
@pytest.mark.timeout(900)
def test_ray_job_stop_interrupts_a_campaign_that_resume_completes(tmp_path):
    from ray.job_submission import JobStatus, JobSubmissionClient

    ray_tmp = short_temp_dir("rjs")
    work = slow_workdir(tmp_path / "job")
    write_campaign(work / "campaign.toml", base=TINY_RUN, campaign=CAMPAIGN, conditions=(GRPO,),
                   reward={"type": "slow_reward.make"}, logging={"log_dir": f"{tmp_path}/logs"})
    results = tmp_path / "results"
    cdir = results / CAMPAIGN["name"]
    env = cli_env(ray_tmp)
    head, dashboard = _start_head(ray_tmp, tmp_path / "ray_start.log")
    try:
        address = f"http://127.0.0.1:{dashboard}"
        client = JobSubmissionClient(address)
        _submit(address, "campaign-stop", work, env, PYTHON, "-m", "retrain_ray.cli", "campaign.toml",
                "--root", str(results))
        wait_for(lambda: rows_logged(cdir) >= 1 or client.get_job_status("campaign-stop").is_terminal(),
                 timeout_s=400, what="the submitted campaign's first step")
        assert client.get_job_status("campaign-stop") == JobStatus.RUNNING, client.get_job_logs("campaign-stop")[-3000:]
        stopped_at = time.monotonic()
        assert client.stop_job("campaign-stop")  # what `ray job stop` asks, without the CLI's start-up time
        wait_for(lambda: client.get_job_status("campaign-stop").is_terminal(), timeout_s=60, what="the job to stop")
        stop_s = time.monotonic() - stopped_at
        logs = client.get_job_logs("campaign-stop")
        manifest = read_manifest(cdir)
        print(f"ray job stop took {stop_s:.1f} s; manifest {manifest and manifest['status']}")
        assert f"retrain-ray resume {cdir}" in logs, logs[-3000:]
        assert manifest is not None and manifest["status"] == "interrupted", logs[-3000:]

        command = continue_command(logs)
        assert command, logs[-3000:]
        _submit(address, "campaign-resume", work, env, *command)
        wait_for(lambda: client.get_job_status("campaign-resume").is_terminal(), timeout_s=500,
                 what="the resumed campaign", poll_s=1.0)
        resumed = client.get_job_status("campaign-resume")
        resume_logs = client.get_job_logs("campaign-resume")
    finally:
        kill_owned(head.pid, ray_tmp)
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert resumed == JobStatus.SUCCEEDED, resume_logs[-3000:]
    runs = manifest_runs(cdir)
    assert runs is not None and {r["status"] for r in runs.values()} == {"completed"}
    for name in runs:
        assert not steps_once(cdir / "runs" / name, STEPS)
