"""`ray job submit` of a campaign to a separate local cluster (`ray start --head`, own ports and
temp dir, dashboard on), then the cluster is stopped by killing exactly the processes it started.

The job's driver is `python -m retrain_ray.cli CAMPAIGN.toml`: it connects through RAY_ADDRESS
(set by the job manager) instead of starting a Ray of its own, and prints where the results are.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import tomllib
from campaign_helpers import PYTHON, REPO, isolated_env, kill_owned, short_temp_dir, start
from helpers import free_port, write_campaign

RAY = str(Path(PYTHON).parent / "ray")


def _write_campaign(path: Path) -> Path:
    """The smoke campaign, cut down to 2 runs of 4 steps (whatever the demo's own step counts are)."""
    smoke = tomllib.loads((REPO / "configs" / "smoke-campaign.toml").read_text())
    return write_campaign(path, base=smoke, training={"sft_warmup_steps": 4},
                          campaign={"name": "submitted", "seeds": [1, 2], "max_steps": 4, "max_workers": 1})


def _start_head(ray_tmp: Path, log: Path) -> tuple[subprocess.Popen, int]:
    dashboard = free_port()
    ports = {"--port": free_port(), "--dashboard-port": dashboard, "--dashboard-agent-listen-port": free_port(),
             "--dashboard-agent-grpc-port": free_port(), "--metrics-export-port": free_port(),
             "--runtime-env-agent-port": free_port(), "--node-manager-port": free_port(),
             "--object-manager-port": free_port(), "--ray-client-server-port": free_port()}
    cmd = [RAY, "start", "--head", "--num-cpus", "2", "--num-gpus", "0", "--include-dashboard", "true",
           "--dashboard-host", "127.0.0.1", "--temp-dir", str(ray_tmp), "--disable-usage-stats",
           *[str(x) for kv in ports.items() for x in kv]]
    proc = start(cmd, env=isolated_env(ray_tmp), log=log)
    rc = proc.wait(timeout=120)  # `ray start` returns once the head's processes are up
    assert rc == 0, log.read_text()[-3000:]
    return proc, dashboard


@pytest.mark.slow
@pytest.mark.cluster
@pytest.mark.timeout(420)
def test_ray_job_submit_runs_a_campaign_on_a_running_cluster(tmp_path):
    from ray.job_submission import JobStatus, JobSubmissionClient

    ray_tmp = short_temp_dir("rrj")
    work = tmp_path / "job"
    work.mkdir()
    _write_campaign(work / "campaign.toml")
    results = tmp_path / "results"
    head, dashboard = _start_head(ray_tmp, tmp_path / "ray_start.log")
    try:
        address = f"http://127.0.0.1:{dashboard}"
        submit = subprocess.run(
            [RAY, "job", "submit", "--address", address, "--submission-id", "campaign-1", "--working-dir", str(work),
             "--", PYTHON, "-m", "retrain_ray.cli", "campaign.toml", "--root", str(results)],
            env=isolated_env(ray_tmp), capture_output=True, text=True, timeout=300, cwd=tmp_path,
        )
        client = JobSubmissionClient(address)
        status = client.get_job_status("campaign-1")
        logs = client.get_job_logs("campaign-1")
        assert status == JobStatus.SUCCEEDED, submit.stdout[-3000:] + submit.stderr[-3000:]
    finally:
        killed = kill_owned(head.pid, ray_tmp)
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert killed  # the head's processes were ours, and they are gone
    assert "[campaign] connected to the Ray cluster at" in logs  # RAY_ADDRESS honoured, no local Ray
    cdir = results / "submitted"
    assert f"results: {cdir}" in logs
    for run in ("grpo+none_s1", "grpo+none_s2"):
        assert (cdir / "runs" / run / "metrics.parquet").is_file()
        assert any((cdir / "runs" / run).glob("metrics*.arrows"))
