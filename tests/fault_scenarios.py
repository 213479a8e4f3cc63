"""Repeated, randomized fault injection on real Ray (issue 15): the scenarios that benchmarks/faults.py
runs many times and tests/campaign/test_faults.py runs once each. Part 1: killed trials, killed drivers, lost
nodes; part 2 (fault_scenarios_io.py): throttle lease holders, a failing endpoint, full and read-only
disks.

Every scenario function takes (trials, rng, root) and returns one `Trial` per trial, with its invariant
checked after that trial and the time it took to recover. It reuses the single-fault tests' machinery:
tests/campaign_driver.py (a killable driver), tests/cluster_scenarios.py (a simulated multi-node
cluster) and tests/campaign_helpers.py (process sessions, cleanup by session and Ray temp dir).
Scenarios that need the caller's Ray (`SESSION_RAY`) expect a local Ray with >= 4 CPUs.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import helpers
from campaign_helpers import (
    PYTHON,
    REPO,
    driver_cmd,
    isolated_env,
    kill_driver_when,
    kill_owned,
    read_manifest,
    remove_temp_dir,
    rows_logged,
    run_to_end,
    short_temp_dir,
    start,
    steps_once,
)

from retrain_ray.logs.manifest import RunRecord

STEPS = 6


@dataclass
class Trial:
    passed: bool
    recovery_s: float | None
    detail: str


# The uninterrupted twin of a GRPO run in the same campaign: save_every is 2 already, so the override
# changes the run's name only; one campaign holds both (one Tune start and one set of trial processes
# instead of a separate baseline campaign).
TWIN = {**helpers.GRPO, "save_every": 2}


def write_campaign(root: Path, name: str, seeds: list[int], *, steps: int = STEPS, parallel: bool = True,
                   twins: bool = False, max_workers: int = 2) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    return helpers.write_campaign(
        root / f"{name}.toml", base=helpers.TINY_RUN,
        conditions=[helpers.GRPO, TWIN] if twins else [helpers.GRPO],
        campaign={"name": name, "seeds": list(seeds), "max_steps": steps, "parallel": parallel,
                  "max_workers": max_workers, "max_failures": 2, "trial_start_timeout_s": 240})


def twin_of(runs: Sequence[RunRecord], run: RunRecord) -> RunRecord:
    """The uninterrupted twin (condition TWIN, same seed) of a run of a `twins=True` campaign."""
    return next(r for r in runs if r.seed == run.seed and r.run_name != run.run_name)


def final_weights(run_dir: Path) -> dict:
    from safetensors.torch import load_file

    weights: dict = {}
    for path in sorted((run_dir / "checkpoints" / "final").glob("*.safetensors")):
        weights.update(load_file(str(path)))
    return weights


def same_weights(a: dict, b: dict) -> bool:
    import torch

    return bool(a) and a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def first_row_after(run_dir: Path, moment: float) -> float | None:
    """Seconds from `moment` (time.time()) to the first metrics row written after it."""
    from retrain_ray.logs import read_stream

    walls = [w.timestamp() for w in read_stream(run_dir, key=None)["wall_time"].to_pylist() if w is not None]
    later = [w for w in walls if w > moment]
    return min(later) - moment if later else None


# ---- 1. a run's trial process killed at a random step -------------------------------------------------
def make_kill_runner(plan: dict[str, tuple[int, float]]):
    """train_run whose trial process SIGKILLs itself once, at step plan[run][0] after plan[run][1] s."""

    def runner(config, **kwargs):
        from retrain_ray.logs.types import RunObserver
        from retrain_ray.run.train import train_run

        marker = Path(kwargs["run_dir"]).parent / "killed.json"
        step, delay = plan.get(kwargs["run_name"], (-1, 0.0))

        class Kill(RunObserver):
            def on_step(self, row, **info):
                if row["step"] == step and not marker.exists():
                    time.sleep(delay)
                    marker.write_text(json.dumps({"step": step, "at": time.time()}))
                    os.kill(os.getpid(), signal.SIGKILL)

        kwargs["observers"] = [*kwargs["observers"], Kill()]
        return train_run(config, **kwargs)

    return runner


def run_kill(trials: int, rng: random.Random, root: Path) -> list[Trial]:
    """`trials` runs (one per seed) of one campaign, each killed once at a random step; compared with
    their uninterrupted twins (same config and seed) in the same campaign."""
    from ray import cloudpickle

    from retrain_ray.campaign import Campaign

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    seeds = list(range(1, trials + 1))
    plan = {f"grpo+none_s{s}": (rng.randrange(STEPS), rng.uniform(0.0, 0.3)) for s in seeds}
    results = Campaign.from_toml(write_campaign(root, "killed", seeds, twins=True, max_workers=4), root=root,
                                 runner=make_kill_runner(plan)).run(progress=False)
    runs = {r.run_name: r for r in results.runs}
    out = []
    for name, (step, _) in plan.items():
        twin = twin_of(results.runs, runs[name]).run_name
        run_dir, base_dir = root / "killed" / "runs" / name, root / "killed" / "runs" / twin
        killed = json.loads((run_dir / "killed.json").read_text()) if (run_dir / "killed.json").exists() else {}
        problems = [steps_once(run_dir, STEPS)]
        if runs[name].status != "completed" or runs[name].attempts != 2 or not killed:
            problems.append(f"status {runs[name].status}, attempts {runs[name].attempts}, killed {killed}")
        if not same_weights(final_weights(run_dir / "work"), final_weights(base_dir / "work")):
            problems.append("final weights differ from the uninterrupted run's")
        problems = [p for p in problems if p]
        recovery = first_row_after(run_dir, killed["at"]) if killed else None
        out.append(Trial(not problems, recovery, f"{name} killed at step {step}; " + ("; ".join(problems) or "ok")))
    return out


# ---- 2. the campaign driver killed at a random moment, then the same command again ------------------
def driver_kill_once(rng: random.Random, root: Path) -> Trial:
    toml, cdir = write_campaign(root, "driven", [1, 2], parallel=False), root / "driven"
    # The kill lands after a random number of logged steps, not a random time: a fast machine
    # finishes the campaign within any fixed window.
    kill_after = rng.randint(1, 2 * STEPS - 1)
    ended = kill_driver_when(lambda: rows_logged(cdir) >= kill_after, driver_cmd(toml, root, 0.2),
                             log=root / "driver1.log", prefix="rrf", timeout_s=400,
                             what=f"{kill_after} logged steps", poll_s=0.05)
    if ended is not None:  # no fault was injected: not a passed trial
        return Trial(False, None, f"the driver ended (exit {ended}) before the kill: "
                     f"{(root / 'driver1.log').read_text()[-300:]!r}")
    before = read_manifest(cdir) or {"runs": []}
    done_before = {r["run_name"]: r["attempts"] for r in before["runs"] if r["status"] == "completed"}
    segments = {name: _segments(cdir / "runs" / name) for name in done_before}
    started = time.time()
    rc, left = run_to_end(driver_cmd(toml, root, 0.2), log=root / "driver2.log", prefix="rrf", timeout_s=400)
    recovery = time.time() - started
    after = read_manifest(cdir) or {"runs": [], "status": "?"}
    problems = [f"second command exit {rc}"] if rc != 0 else []
    problems += [f"left running: {left}"] if left else []
    problems += [] if after.get("status") == "done" else [f"campaign status {after.get('status')}"]
    for run in after["runs"]:
        if run["status"] != "completed":
            problems.append(f"{run['run_name']} {run['status']}")
        name = run["run_name"]
        # ran again: started again (attempts) or wrote a row again (a new log segment of its own)
        if name in done_before and (run["attempts"], _segments(cdir / "runs" / name)) != (done_before[name],
                                                                                          segments[name]):
            problems.append(f"finished run {name} ran again (attempts {done_before[name]} -> {run['attempts']})")
        problems.append(steps_once(cdir / "runs" / run["run_name"], STEPS))
    problems = [p for p in problems if p]
    killed_at = f"killed with {sorted(done_before)} finished"
    return Trial(not problems, recovery, f"{killed_at}; " + ("; ".join(problems) or "ok"))


def _segments(run_dir: Path) -> list[str]:
    from retrain_ray.logs.stream import segment_paths

    return [p.name for p in segment_paths(run_dir, "metrics")]


def driver_kill(trials: int, rng: random.Random, root: Path) -> list[Trial]:
    return [driver_kill_once(rng, root / f"t{i}") for i in range(trials)]


# ---- 3. a worker node removed mid-run (ray.cluster_utils.Cluster, in its own process) ---------------
def node_removal(trials: int, rng: random.Random, root: Path) -> list[Trial]:
    root.mkdir(parents=True, exist_ok=True)
    ray_tmp = short_temp_dir("rrn")
    proc = start([PYTHON, str(REPO / "tests" / "cluster_scenarios.py"), str(root), "--removals", str(trials),
                  "--seed", str(rng.randrange(2**31))], env=isolated_env(ray_tmp), log=root / "cluster.log")
    try:
        proc.wait(timeout=240 + 240 * trials)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        kill_owned(proc.pid, ray_tmp)
        remove_temp_dir(ray_tmp)
    lines = [line for line in (root / "cluster.log").read_text().splitlines() if line.startswith("{")]
    if not lines:
        tail = (root / "cluster.log").read_text()[-1500:]
        return [Trial(False, None, f"the cluster process reported nothing: {tail}")] * trials
    out = []
    for removal in json.loads(lines[-1])["removals"]:
        nodes, removed = removal.get("attempt_nodes", []), removal.get("removed", {})
        problems = [removal["errors"] and f"errors {removal['errors']}", removed.get("error", "")]
        if removal.get("finished_before_removal"):
            problems.append("the run had logged its last step before the removal (no fault injected)")
        if removal.get("status") != "completed" or len(nodes) < 2 or nodes[-1] == removed.get("node_id"):
            problems.append(f"status {removal.get('status')}, attempts on {nodes}, removed {removed}")
        if removal.get("steps") != list(range(removal.get("max_steps", -1))):
            problems.append(f"steps {removal.get('steps')}")
        problems = [p for p in problems if p]
        out.append(Trial(not problems, removal.get("recovery_s"),
                         f"removed at step {removed.get('at_step')}; " + ("; ".join(problems) or "ok")))
    return out
