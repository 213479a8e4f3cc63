"""Fault scenario, part 3 (see fault_scenarios.py): one actor of a split placement SIGKILLed.

A run with two GPUs drives an InferenceActor and a TrainerActor in its placement group
(retrain_ray/actors/run_actors.py). At a random step the trial SIGKILLs one of them (the role
alternates between trials, from a random first one) by the pid the run recorded in
`work/placement.json`. The trial's next call to the dead actor fails the attempt, Tune retries it
from its last checkpoint with two new actors, and the run must end as the same run of an
uninterrupted split campaign does: every step once and bit-identical final weights (the checkpoint
holds the trainer's state and the sampler's generator state, so the synchronous split path resumes
exactly). Needs the caller's Ray with 4 (fake) GPUs: `ray.init(num_gpus=4)`.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import time
from pathlib import Path

from campaign_helpers import steps_once
from fault_scenarios import STEPS, Trial, final_weights, first_row_after, same_weights
from helpers import TINY_RUN, write_campaign

from retrain_ray.campaign.trial import PLACEMENT_FILE
from retrain_ray.logs.manifest import RunRecord

ROLES = ("inference", "trainer")


def _campaign(root: Path, name: str, seeds: list[int]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    return write_campaign(root / f"{name}.toml", base=TINY_RUN, backend={"devices": "gpu:0,gpu:1"}, campaign={
        "name": name, "seeds": seeds, "max_steps": STEPS, "parallel": True, "max_workers": 2, "max_failures": 2,
        "trial_start_timeout_s": 240})


def make_actor_kill_runner(plan: dict[str, tuple[int, str]]):
    """train_run whose trial SIGKILLs its split actor `plan[run][1]` once, after logging step plan[run][0]."""

    def runner(config, **kwargs):
        from retrain_ray.logs.types import RunObserver
        from retrain_ray.run.train import train_run

        work = Path(kwargs["run_dir"])
        marker = work.parent / "killed.json"
        step, role = plan.get(kwargs["run_name"], (-1, ""))

        class KillActor(RunObserver):
            def on_step(self, row, **info):
                if row["step"] != step or marker.exists():
                    return
                attempt = json.loads((work / PLACEMENT_FILE).read_text())[-1]
                pid = next(a["pid"] for a in attempt if a["role"] == role)
                marker.write_text(json.dumps({"step": step, "role": role, "pid": pid, "at": time.time()}))
                os.kill(pid, signal.SIGKILL)

        kwargs["observers"] = [*kwargs["observers"], KillActor()]
        return train_run(config, **kwargs)

    return runner


def _check(run: RunRecord, run_dir: Path, base_dir: Path) -> tuple[list[str], dict]:
    killed = json.loads((run_dir / "killed.json").read_text()) if (run_dir / "killed.json").exists() else {}
    problems = [steps_once(run_dir, STEPS)]
    if run.status != "completed" or run.attempts != 2 or not killed:
        problems.append(f"status {run.status}, attempts {run.attempts}, killed {killed}")
    attempts = json.loads((run_dir / "work" / PLACEMENT_FILE).read_text())
    pids = [{a["role"]: a["pid"] for a in attempt} for attempt in attempts]
    if len(pids) != 2 or killed.get("pid") in pids[-1].values():
        problems.append(f"actors per attempt {pids}: the retry did not run on new actors")
    if not same_weights(final_weights(run_dir / "work"), final_weights(base_dir / "work")):
        problems.append("final weights differ from the uninterrupted run's")
    return [p for p in problems if p], killed


def split_actor_kill(trials: int, rng: random.Random, root: Path) -> list[Trial]:
    """`trials` split runs (one per seed) of one campaign, each losing one actor once at a random step;
    compared with the same runs of an uninterrupted split campaign. Not twins in one campaign as in
    run_kill: with 2 GPUs per run, a killed run's retry would queue behind a twin for the GPUs, and the
    recovery time would measure that queue (88 s vs 40 s seen)."""
    from ray import cloudpickle

    from retrain_ray.campaign import Campaign

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    seeds = list(range(1, trials + 1))
    Campaign.from_toml(_campaign(root, "baseline", seeds), root=root).run(progress=False)
    first = rng.randrange(2)
    plan = {f"grpo+none_s{s}": (rng.randrange(STEPS), ROLES[(first + i) % 2]) for i, s in enumerate(seeds)}
    results = Campaign.from_toml(_campaign(root, "killed", seeds), root=root,
                                 runner=make_actor_kill_runner(plan)).run(progress=False)
    runs = {r.run_name: r for r in results.runs}
    out = []
    for name, (step, role) in plan.items():
        run_dir = root / "killed" / "runs" / name
        problems, killed = _check(runs[name], run_dir, root / "baseline" / "runs" / name)
        recovery = first_row_after(run_dir, killed["at"]) if killed else None
        out.append(Trial(not problems, recovery, f"{name}: {role} killed after step {step}; "
                         + ("; ".join(problems) or "ok")))
    return out
