"""Benchmark: the least time a campaign that starts its own Ray can take here, part by part.

`benchmarks/campaign.py` times a whole campaign against one `retrain-ray train` subprocess per run.
This one measures, each alone on the machine, in fresh processes, min over `--reps`, the parts such a
campaign cannot overlap (Ray starts a trial's process only once its node is up, and a run starts only
once its process has imported torch and Tune's trainable):

1. `import ray`: the driver's first import;
2. `ray.init` of the lean local Ray a campaign starts (campaign/local_ray.py);
3. a trial process's imports (`local_ray.trial_modules`: Tune's trainable, the trial, the run loop);
4. every run of the campaign, one after another in one process with one thread (`train_run`), divided
   by `max_workers`: the runs of a campaign, perfectly packed on its concurrent slots.

The floor is their sum; each part measured alone also assumes nothing else takes CPU meanwhile (in a
campaign Ray's agents, the recorder and the driver do). It then runs the campaign itself and the
baseline of benchmarks/campaign.py (same config, alternating, `--reps` each) and prints the floor's
ratio to the baseline, and what the campaign spends beyond the floor: its driver's own work (config,
manifest, Tune, results, `ray.shutdown`), the other processes' CPU, recorder and Tune per run. Where the
floor's ratio is near 0.5, a campaign at most half the baseline would need that overhead near zero.

Run: `.venv/bin/python benchmarks/campaign_floor.py [--reps 3] [--config FILE] [--json]`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from campaign import DEFAULT_CONFIG, REPO, _max_workers, baseline, retrain_ray  # noqa: E402

IMPORT_RAY = """
import time
start = time.perf_counter()
import ray
print(time.perf_counter() - start)
"""
RAY_INIT = """
import time
import ray
from retrain_ray.campaign.local_ray import lean_local_ray
with lean_local_ray():
    start = time.perf_counter()
    ray.init(address="local", namespace="floor", log_to_driver=False, include_dashboard=False)
    took = time.perf_counter() - start
ray.shutdown()
print(took)
"""
TRIAL_IMPORTS = """
import time
start = time.perf_counter()
import importlib
from retrain_ray.campaign.local_ray import trial_modules
for name in trial_modules(peft={peft}):
    importlib.import_module(name)
print(time.perf_counter() - start)
"""
RUNS = """
import sys, tempfile, time
import torch
torch.set_num_threads(1)
from retrain_ray.config import expand_runs, load_config
from retrain_ray.run.train import train_run
total = 0.0
for spec in expand_runs(load_config(sys.argv[1])):
    start = time.perf_counter()
    train_run(spec.config, run_name=spec.run_name, run_dir=tempfile.mkdtemp(), observers=[], local_logs=False)
    total += time.perf_counter() - start
print(total)
"""


def _seconds(code: str, *args: str, timeout_s: float = 600.0) -> float:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    env.pop("RAY_ADDRESS", None)
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], capture_output=True, text=True,
                          env=env, cwd=REPO, timeout=timeout_s)
    if done.returncode != 0:
        raise RuntimeError(f"a part failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return float(done.stdout.strip().splitlines()[-1])


def parts(config_path: Path, reps: int) -> dict[str, float]:
    """Each part's minimum over `reps` fresh processes (seconds)."""
    from retrain_ray.config import expand_runs, load_config
    from retrain_ray.models.context import config_uses_peft

    config = load_config(config_path)
    peft = any(config_uses_peft(spec.config) for spec in expand_runs(config))
    slots = _max_workers(config_path)
    measured = {"import_ray_s": IMPORT_RAY, "ray_init_s": RAY_INIT, "trial_imports_s": TRIAL_IMPORTS.format(peft=peft)}
    found = {key: min(_seconds(code) for _ in range(reps)) for key, code in measured.items()}
    found["runs_s"] = min(_seconds(RUNS, str(config_path)) for _ in range(reps)) / slots
    return found


def _campaigns(config_path: Path, reps: int) -> tuple[float, float]:
    """The retrain-ray campaign's and the baseline's wall time, min over `reps` each, alternating."""
    ours, base = [], []
    with tempfile.TemporaryDirectory() as work:
        for _ in range(reps):
            ours.append(retrain_ray(config_path, Path(tempfile.mkdtemp(dir=work)), 900.0)["wall_s"])
            base.append(baseline(config_path, Path(tempfile.mkdtemp(dir=work)), 900.0)["wall_s"])
    return min(ours), min(base)


LABELS = {"import_ray_s": "`import ray` (driver)", "ray_init_s": "`ray.init` of the lean local Ray",
          "trial_imports_s": "a trial process's imports", "runs_s": "the runs, packed on max_workers slots"}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", type=Path, default=DEFAULT_CONFIG)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    config_path = args.config.resolve()
    found = parts(config_path, args.reps)
    floor = sum(found.values())
    ours, base = _campaigns(config_path, args.reps)
    if args.json:
        print(json.dumps({**found, "floor_s": floor, "campaign_wall_s": ours, "baseline_wall_s": base}))
        return 0
    print("| part (min over repetitions) | seconds |\n|---|---:|")
    for key, seconds in found.items():
        print(f"| {LABELS[key]} | {seconds:.2f} |")
    print(f"| **floor** (sum) | **{floor:.2f}** |")
    print(f"| retrain-ray campaign (min of {args.reps}) | {ours:.2f} |")
    print(f"| baseline campaign (min of {args.reps}) | {base:.2f} |")
    print(f"\nfloor / baseline = {floor / base:.2f}, campaign / baseline = {ours / base:.2f} (the issue's bar: "
          f"at most 0.5); the campaign's time beyond the floor: {ours - floor:.2f} s; load "
          f"{os.getloadavg()[0]:.1f}, {os.cpu_count()} CPUs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
