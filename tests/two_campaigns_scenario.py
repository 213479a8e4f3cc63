"""Two campaigns of one name started at once on one simulated cluster (ray.cluster_utils.Cluster: a head
without CPUs, two workers with 2 CPUs and 2 fake GPUs each), each by its own driver process joined to the
cluster through RAY_ADDRESS, as two `ray job submit`s of one TOML with different log dirs would be. Run in
its own process by tests/campaign/test_two_campaigns.py (a Cluster cannot share the test session's Ray).

    python tests/two_campaigns_scenario.py OUT_DIR   -> prints one JSON line: each driver's exit code and
                                                        each campaign's runs, their status and logged steps
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from campaign_helpers import read_manifest
from helpers import GRPO, TINY_RUN, write_campaign
from ray.cluster_utils import Cluster

STEPS = 4
NAME = "twin"  # both campaigns: the name two users would both pick


def _campaign(out: Path, which: str) -> tuple[Path, Path]:
    """The TOML of one of the two campaigns and its directory (each under its own log root)."""
    root = out / which
    root.mkdir(parents=True, exist_ok=True)
    toml = write_campaign(root / "c.toml", base=TINY_RUN, logging={"log_dir": f"{root}/logs"},
                          campaign={"name": NAME, "seeds": [1, 2], "max_steps": STEPS, "parallel": True,
                                    "max_workers": 2, "cpus_per_run": 1, "trial_start_timeout_s": 240},
                          conditions=(GRPO,))
    return toml, root / "logs" / NAME


def _steps(run_dir: Path) -> list[int]:
    from retrain_ray.logs import read_stream

    try:
        return sorted(read_stream(run_dir).column("step").to_pylist())
    except (OSError, ValueError):
        return []


def _outcome(campaign_dir: Path) -> dict[str, dict[str, object]]:
    manifest = read_manifest(campaign_dir) or {"runs": []}
    return {r["run_name"]: {"status": r["status"], "steps": _steps(campaign_dir / "runs" / r["run_name"])}
            for r in manifest["runs"]}


def main(out: Path) -> int:
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "num_gpus": 0})
    for _ in range(2):
        cluster.add_node(num_cpus=2, num_gpus=2)
    cluster.wait_for_nodes()
    try:
        campaigns = {which: _campaign(out, which) for which in ("a", "b")}
        env = {**os.environ, "RAY_ADDRESS": cluster.address}
        drivers = {which: subprocess.Popen([sys.executable, "-m", "retrain_ray", str(toml)], cwd=toml.parent,
                                           env=env, stdout=open(out / f"{which}.log", "w"),  # noqa: SIM115
                                           stderr=subprocess.STDOUT)
                   for which, (toml, _) in campaigns.items()}
        codes = {which: proc.wait(timeout=600) for which, proc in drivers.items()}
        result = {"codes": codes, "steps": STEPS,
                  "runs": {which: _outcome(cdir) for which, (_, cdir) in campaigns.items()}}
        print(json.dumps(result), flush=True)
        return 0
    finally:
        cluster.shutdown()


if __name__ == "__main__":
    raise SystemExit(main(Path(sys.argv[1])))
