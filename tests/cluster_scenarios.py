"""Simulated multi-node scenarios (ray.cluster_utils.Cluster), run in their own process by
tests/campaign/test_campaign_nodes.py, because a Cluster cannot share the test session's Ray.

    python tests/cluster_scenarios.py OUT_DIR   -> prints one JSON line with what happened
    python tests/cluster_scenarios.py OUT_DIR --removals N [--seed S]   -> scenario 2 only, N times
        (benchmarks/faults.py): each time at a random step, then a fresh worker replaces the lost one

Cluster: a head with no CPUs and no GPUs (driver, recorder) and two worker nodes with 2 CPUs and
2 fake GPUs each; a short health check so a removed node is noticed in about 1.5 s.

1. split packing: two split placements ([{CPU}, {GPU:1}, {GPU:1}], STRICT_PACK) are reserved;
   each lands whole on one node, and they take different nodes.
2. node removal: a one-run CPU campaign (steps slowed down) starts on a worker; once Tune has a
   checkpoint of it, that worker is lost: its raylet and every process under it (the run's trial
   worker included) are SIGKILLed at once, as when a machine goes away, then the node is removed
   from the cluster; Tune retries the run on the other worker. (`Cluster.remove_node` alone kills
   the raylet but not its workers, which run on for a second or more: a run near its end finished
   on the "removed" node, issue 15.)
3. plugins: a one-run campaign whose reward plugin lives in the driver's ./plugins, which the run renames
   away before it starts: the trial, on a worker node, imports the plugin from the bundle the driver
   shipped (campaign/plugin_bundle.py).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

import ray
from campaign_helpers import read_manifest
from helpers import GRPO, SHIPPED_REWARD, wait_for, write_campaign
from ray import cloudpickle
from ray.cluster_utils import Cluster

HEALTH = {"health_check_period_ms": 500, "health_check_failure_threshold": 3}
TRAINING = {"batch_size": 2, "group_size": 4, "max_tokens": 4, "lr": 3e-3, "save_every": 2, "sft_warmup_steps": 8}
CAMPAIGN = {"seeds": [1], "max_steps": 8, "max_failures": 2, "trial_start_timeout_s": 120}


def split_packing() -> dict:
    from ray.util.placement_group import placement_group, placement_group_table, remove_placement_group

    from retrain_ray.campaign.capacity.placement import placement_for

    split, _ = placement_for("gpu:0,gpu:1", cpus_per_run=1.0, cluster_gpus=4.0)
    groups = [placement_group(split.bundle_dicts, strategy=split.strategy) for _ in range(2)]
    ray.get([g.ready() for g in groups], timeout=60)
    nodes = [sorted(set(placement_group_table(g)["bundles_to_node_id"].values())) for g in groups]
    for g in groups:
        remove_placement_group(g)
    return {"strategy": split.strategy, "bundles": split.bundle_dicts, "nodes_per_group": nodes}


def node_logging_runner(config, **kwargs):
    """train_run that records the node and start time of each attempt (`nodes.txt`, one line each)
    and sleeps 0.4 s after every step."""
    from retrain_ray.logs.types import RunObserver
    from retrain_ray.run.train import train_run

    class SlowSteps(RunObserver):
        def on_step(self, row, **info):
            time.sleep(0.4)

    work = Path(kwargs["run_dir"])
    work.mkdir(parents=True, exist_ok=True)
    with open(work / "nodes.txt", "a") as fh:
        fh.write(f"{ray.get_runtime_context().get_node_id()} {time.time()}\n")
    kwargs["observers"] = [*kwargs["observers"], SlowSteps()]
    return train_run(config, **kwargs)


def plugin_runner(folder: str):
    """train_run that first renames the driver's plugin folder away and records its node (`node.txt`)."""

    def runner(config, **kwargs):
        from retrain_ray.run.train import train_run

        if Path(folder).exists():
            Path(folder).rename(folder + ".gone")
        work = Path(kwargs["run_dir"])
        work.mkdir(parents=True, exist_ok=True)
        (work / "node.txt").write_text(ray.get_runtime_context().get_node_id())
        return train_run(config, **kwargs)

    return runner


def plugin_shipping(root: Path) -> dict:
    """Scenario 3: where the trial imported its reward plugin from, on which node, and what it scored."""
    from retrain_ray.campaign import Campaign

    driver, report = root / "plugin_driver", root / "plugin_imports.txt"
    (driver / "plugins").mkdir(parents=True)
    (driver / "plugins" / "node_reward.py").write_text(SHIPPED_REWARD.format(report=str(report)))
    toml = write_campaign(driver / "c.toml", reward={"type": "node_reward:make"}, algorithm=GRPO,
                          training={"batch_size": 2, "group_size": 4, "max_tokens": 4, "save_every": 0},
                          campaign={"name": "plugins", "seeds": [1], "max_steps": 2, "max_failures": 0,
                                    "trial_start_timeout_s": 120})
    before = os.getcwd()
    os.chdir(driver)
    try:
        campaign = Campaign.from_toml(toml, root=root, runner=plugin_runner(str(driver / "plugins")))
        results = campaign.run(progress=False)
    finally:
        os.chdir(before)
    run = results.runs[0]
    work = campaign.campaign_dir / "runs" / run.run_name / "work"
    return {"status": run.status, "errors": results.error_by_run, "driver_plugins": str(driver / "plugins"),
            "imports": report.read_text().split() if report.is_file() else [],
            "node": (work / "node.txt").read_text() if (work / "node.txt").is_file() else "",
            "mean_rewards": [float(r) for r in results.history(run.run_name)["mean_reward"]]}


def _running_node(cluster: Cluster, cdir: Path, at_step: int) -> tuple[object, int] | None:
    """The worker node the run runs on and its step, once the run's step `at_step` is in the manifest."""
    nodes_file = cdir / "runs" / "grpo+none_s1" / "work" / "nodes.txt"
    try:
        step = (read_manifest(cdir) or {})["runs"][0].get("result", {}).get("step", -1)
    except (OSError, json.JSONDecodeError, KeyError, IndexError):
        return None
    if step < at_step or not nodes_file.is_file():
        return None
    node_id = _attempts(nodes_file)[0][0]
    return next(((node, step) for node in cluster.worker_nodes if node.node_id == node_id), None)


def _remove_running_node(cluster: Cluster, cdir: Path, removed: dict, timeout_s: float = 180.0,
                         at_step: int = 1) -> None:
    """Waits for the run's step `at_step` (>= 1: a checkpoint) in the manifest, then removes its node."""
    try:
        node, step = wait_for(lambda: _running_node(cluster, cdir, at_step), timeout_s=timeout_s,
                              what=f"the run's step {at_step}")
    except TimeoutError as err:
        removed["error"] = str(err)
        return
    killed = _lose(node)
    removed.update(node_id=node.node_id, at_step=step, at=time.time(), processes_killed=killed)
    cluster.remove_node(node, allow_graceful=False)


def _attempts(nodes_file: Path) -> list[tuple[str, float]]:
    """(node id, start time) of each attempt of the run, from `node_logging_runner`'s file."""
    return [(node, float(at)) for node, at in (line.split() for line in nodes_file.read_text().splitlines())]


def _lose(node) -> int:
    """SIGKILLs the node's raylet and every process under it at once (a machine that went away);
    returns how many processes it killed."""
    import psutil
    from ray._private import ray_constants

    raylet = psutil.Process(node.all_processes[ray_constants.PROCESS_TYPE_RAYLET][0].process.pid)
    killed = 0
    for proc in [raylet, *raylet.children(recursive=True)]:
        try:
            os.kill(proc.pid, signal.SIGKILL)
            killed += 1
        except ProcessLookupError:
            pass
    return killed


def node_removal(cluster: Cluster, root: Path, at_step: int = 1, name: str = "nodes") -> dict:
    from retrain_ray.campaign import Campaign

    root.mkdir(parents=True, exist_ok=True)
    toml = write_campaign(root / "nodes.toml", training=TRAINING, logging={"log_dir": f"{root}/logs/x"},
                          campaign={"name": name, **CAMPAIGN})
    campaign = Campaign.from_toml(toml, root=root, runner=node_logging_runner)
    removed: dict = {}
    watcher = threading.Thread(target=_remove_running_node, args=(cluster, campaign.campaign_dir, removed),
                               kwargs={"at_step": at_step}, daemon=True)
    watcher.start()
    results = campaign.run(progress=False)
    watcher.join(timeout=10)
    run = results.runs[0]
    run_dir = campaign.campaign_dir / "runs" / run.run_name
    attempts = _attempts(run_dir / "work" / "nodes.txt")
    return {"removed": removed, "attempt_nodes": [node for node, _ in attempts], "status": run.status,
            "attempts": run.attempts, "steps": [int(s) for s in results.history(run.run_name)["step"]],
            "errors": results.error_by_run, "max_steps": CAMPAIGN["max_steps"],
            "finished_before_removal": _finished_before(run_dir, removed.get("at"), CAMPAIGN["max_steps"]),
            "recovery_s": _first_row_after(run_dir, removed.get("at"), attempts[1][1] if len(attempts) > 1 else None)}


def _rows(run_dir: Path) -> list[tuple[int, float]]:
    """(step, wall time) of every row written, retries included."""
    from retrain_ray.logs import read_stream

    table = read_stream(run_dir, key=None)
    return [(s, w.timestamp()) for s, w in zip(table["step"].to_pylist(), table["wall_time"].to_pylist(), strict=True)
            if w is not None]


def _finished_before(run_dir: Path, moment: float | None, max_steps: int) -> bool:
    """True when the run had logged its last step before `moment` (the removal came too late)."""
    return moment is not None and any(s == max_steps - 1 and w < moment for s, w in _rows(run_dir))


def _first_row_after(run_dir: Path, moment: float | None, retry_started: float | None) -> float | None:
    """Seconds from the removal to the first row of the retry (on the new node)."""
    if moment is None or retry_started is None:
        return None
    later = [w for _, w in _rows(run_dir) if w > max(moment, retry_started)]
    return min(later) - moment if later else None


def repeated_removals(cluster: Cluster, root: Path, count: int, seed: int) -> list[dict]:
    """Scenario 2 `count` times, each at a random checkpoint (after step 1 or 3 of 8, so steps are left
    to run whatever the manifest's lag), a fresh worker replacing the removed one."""
    import random

    rng, reports = random.Random(seed), []
    for i in range(count):
        try:
            reports.append(node_removal(cluster, root / f"r{i}", at_step=rng.randint(1, 3), name=f"nodes{i}"))
        except Exception as exc:  # reported as a failed trial
            reports.append({"errors": repr(exc)})
        while len(cluster.worker_nodes) < 2:
            cluster.add_node(num_cpus=2, num_gpus=2)
        cluster.wait_for_nodes(timeout=60)
    return reports


def main(out_dir: str, removals: int = 0, seed: int = 0) -> None:
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    root = Path(out_dir)
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "num_gpus": 0, "_system_config": HEALTH,
                                                            "include_dashboard": False})
    workers = [cluster.add_node(num_cpus=2, num_gpus=2) for _ in range(2)]
    ray.init(address=cluster.address, namespace="retrain-ray", log_to_driver=False)
    try:
        cluster.wait_for_nodes(timeout=60)
        if removals:
            report = {"removals": repeated_removals(cluster, root, removals, seed)}
        else:
            report = {"workers": [w.node_id for w in workers], "head": cluster.head_node.node_id,
                      "split": split_packing(), "removal": node_removal(cluster, root)}
            try:
                report["plugins"] = plugin_shipping(root / "plugins")
            except Exception as exc:  # reported to its own test; the other scenarios' results stand
                report["plugins"] = {"error": repr(exc)}
    finally:
        ray.shutdown()
        cluster.shutdown()
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("out_dir")
    parser.add_argument("--removals", type=int, default=0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    main(args.out_dir, args.removals, args.seed)
